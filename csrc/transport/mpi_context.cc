#include "transport/mpi_context.h"

#include "common/error.h"
#include "transport/mpi_transport.h"
#include "transport/peer_watch.h"

namespace horo {

namespace {
bool g_we_initialized = false;
}

MPI_Comm mpi_attach(MPI_Comm comm, ProcessInfo* info) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw Error("MPI has already been finalized in this process; horo cannot start again");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  info->threads_multiple = provided == MPI_THREAD_MULTIPLE;
  // horo's thread talks MPI while the caller may too (mpi4py): below
  // SERIALIZED that is undefined behaviour, so refuse rather than corrupt.
  if (provided < MPI_THREAD_SERIALIZED) {
    throw Error("MPI was initialised with thread level " + std::to_string(provided) +
                "; horo needs at least MPI_THREAD_SERIALIZED (initialise MPI with MPI_THREAD_MULTIPLE)");
  }

  MPI_Comm ours;
  mpi_check(MPI_Comm_dup(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, &ours), "MPI_Comm_dup");
  MPI_Comm_rank(ours, &info->rank);
  MPI_Comm_size(ours, &info->size);

  MPI_Comm local, cross;
  mpi_check(MPI_Comm_split_type(ours, MPI_COMM_TYPE_SHARED, info->rank, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  MPI_Comm_rank(local, &info->local_rank);
  MPI_Comm_size(local, &info->local_size);
  mpi_check(MPI_Comm_split(ours, info->local_rank, info->rank, &cross), "MPI_Comm_split");
  MPI_Comm_rank(cross, &info->cross_rank);
  MPI_Comm_size(cross, &info->cross_size);
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);
  return ours;
}

void mpi_detach() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize would wait for the ranks that stopped answering; ending the job is all that is left.
  if (peer_watch_failed()) peer_watch_end_job();
  if (g_we_initialized) MPI_Finalize();
}

}  // namespace horo
