#include "transport/transport_choice.h"

#include <mpi.h>

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "transport/mpi_transport.h"
#include "transport/shm_transport.h"

namespace horo {

TransportSettings TransportSettings::from(const Tunables& tunables, int ranks_on_host) {
  TransportSettings s;
  s.mode = tunables.transport;
  s.shm_chunk_bytes = static_cast<size_t>(tunables.shm_chunk_bytes);
  s.shm_heap_bytes = static_cast<size_t>(tunables.shm_heap_bytes);
  s.shm = choose_shm_thresholds(tunables, ranks_on_host, std::max(1u, std::thread::hardware_concurrency()));
  s.spin_microseconds = tunables.spin_microseconds;
  s.spin_yields = tunables.spin_yields;
  s.tunables = tunables;
  return s;
}

namespace {

// True on every rank when all ranks of `comm` share this host's memory.
bool all_on_one_host(MPI_Comm comm) {
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int local_size = 0, size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_size(comm, &size);
  MPI_Comm_free(&local);
  // Every rank's answer, so all ranks pick the same transport.
  int mine = local_size == size ? 1 : 0, everyone = 0;
  mpi_check(MPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return everyone == 1;
}

}  // namespace

std::unique_ptr<Transport> choose_transport(std::unique_ptr<MpiTransport> mpi) {
  const TransportSettings& s = mpi->settings();
  if (s.mode == "mpi") return mpi;
  const bool one_host = all_on_one_host(mpi->comm());
  if (!one_host) {
    if (s.mode == "shm") {
      throw Error("HORO_TRANSPORT=shm: the ranks of this process set are on more than one host; "
                  "use HORO_TRANSPORT=auto or mpi");
    }
    return mpi;
  }
  // One rank has no one to share with: MPI's self path is already free.
  if (s.mode == "auto" && mpi->size() == 1) return mpi;
  return std::make_unique<ShmTransport>(std::move(mpi));
}

}  // namespace horo
