// Which transport serves a process set: the one place that decides.
// HORO_TRANSPORT=auto uses shared memory when every rank of the set is on
// this host (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) says so, not
// hostnames), MPI otherwise; shm insists (an error when the set spans
// hosts); mpi never uses shared memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/tunables.h"
#include "transport/shm/policy.h"
#include "transport/transport.h"

namespace horo {

class MpiTransport;

struct TransportSettings {
  std::string mode = "mpi";  // auto | shm | mpi
  size_t shm_chunk_bytes = size_t(1) << 20;
  size_t shm_heap_bytes = 0;
  ShmThresholds shm;  // shm/policy.h
  int spin_microseconds = 0;
  bool spin_yields = true;
  Tunables tunables;  // the rest, for the shared-memory policy's decisions

  static TransportSettings from(const Tunables& tunables, int ranks_on_host);
};

// Collective over `mpi`'s communicator. Returns `mpi` itself or a transport
// that wraps it (point-to-point and split stay on MPI).
std::unique_ptr<Transport> choose_transport(std::unique_ptr<MpiTransport> mpi);

}  // namespace horo
