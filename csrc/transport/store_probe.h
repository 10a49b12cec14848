// Whether this machine wants non-temporal stores for the shared-memory copies
// (common/stream_bytes.h), found by measuring it once at start-up.
//
// A plain store into a line another core has just read must first take the
// line back from that core's cache. On one 2-vCPU VM this project was measured
// on, that took 3-10x longer in about half the jobs (1 MiB through a slot:
// 400-620 us against 54-131), and streaming stores, which skip the fetch, were
// never slow (124-161 us); on another, no job in 14 was slow and every
// collective ran 3-35% faster with plain copies. So the ranks ask the machine.
#pragma once

#include <mpi.h>

#include <cstddef>

namespace horo {

struct StoreProbe {
  double plain_us = 0;   // fastest plain copy into `area`, just read by another rank
  double stream_us = 0;  // the same with streaming stores
  bool stream() const { return plain_us > stream_us; }
};

// Collective over `comm` (at least two ranks): rank 0 copies `bytes` into `area`
// (shared memory every rank maps) while rank 1 reads it between copies, in
// turns plain and streamed. The result is rank 0's; other ranks get zeros.
StoreProbe probe_stores(MPI_Comm comm, char* area, size_t bytes);

}  // namespace horo
