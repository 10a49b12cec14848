// Bringing MPI up (or joining the MPI a caller such as mpi4py brought up)
// and describing where this process sits: global, node-local and cross-node
// ranks.
#pragma once

#include <mpi.h>

namespace horo {

struct ProcessInfo {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among processes on this node
  int cross_rank = 0, cross_size = 1;  // among processes with the same local_rank
  bool threads_multiple = false;
};

// Initialises MPI with MPI_THREAD_MULTIPLE unless already initialised, and
// returns a duplicate of `comm` (MPI_COMM_WORLD if MPI_COMM_NULL) for horo's
// exclusive use. Collective over `comm`.
MPI_Comm mpi_attach(MPI_Comm comm, ProcessInfo* info);

// Finalises MPI if horo initialised it (at interpreter exit).
void mpi_detach();

}  // namespace horo
