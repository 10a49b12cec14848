#include "transport/shm/store_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/copy_bytes.h"
#include "common/stream_bytes.h"

namespace horo {

StoreProbe probe_stores(MPI_Comm comm, char* area, size_t bytes) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Each kind's fastest copy counts: a slow one may be a rank descheduled mid-copy (more ranks than cores).
  constexpr int kRounds = 5;
  std::vector<char> source(rank == 0 ? bytes : 0, 1);
  StoreProbe result;
  result.plain_us = result.stream_us = 1e30;
  for (int round = 0; round <= 2 * kRounds; ++round) {
    if (rank == 1) {  // the reader takes every line of the area into its cache
      uint64_t sum = 0;
      for (size_t i = 0; i + sizeof(uint64_t) <= bytes; i += 64) sum += *reinterpret_cast<volatile uint64_t*>(area + i);
      asm volatile("" : : "r"(sum));
    }
    MPI_Barrier(comm);
    if (rank == 0) {
      const bool streamed = round % 2 == 1;
      const auto start = std::chrono::steady_clock::now();
      if (streamed) {
        stream_bytes(area, source.data(), bytes);
      } else {
        copy_bytes(area, source.data(), bytes);
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      double& best = streamed ? result.stream_us : result.plain_us;
      if (round > 0) best = std::min(best, us);  // round 0 warms the source and the area's pages
    }
    MPI_Barrier(comm);
  }
  return rank == 0 ? result : StoreProbe{};
}

}  // namespace horo
