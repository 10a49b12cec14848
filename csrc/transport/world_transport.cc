#include "transport/world_transport.h"

#include <cctype>

#include "common/logging.h"
#include "transport/hierarchical_transport.h"
#include "transport/mpi_transport.h"
#include "transport/peer_watch.h"
#include "transport/transport_choice.h"

namespace horo {

std::unique_ptr<Transport> make_world_transport(MPI_Comm ours, const ProcessInfo& info, const Tunables& tunables,
                                                std::string* description) {
  set_mpi_waits_may_sleep(info.cross_size == 1);
  peer_watch_start(ours, tunables.peer_timeout_seconds);
  const TransportSettings settings = TransportSettings::from(tunables, info.local_size);
  auto flat = std::make_unique<MpiTransport>(ours, settings);
  // Every rank takes the same branch: the inputs are global agreements.
  int sizes[2] = {info.local_size, -info.local_size};  // max and -min of ranks per host
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, ours), "MPI_Allreduce");
  const bool even_hosts = sizes[0] == -sizes[1];
  const bool wanted = tunables.hierarchical_allreduce != "0" || tunables.hierarchical_allgather != "0";
  if (!wanted || info.cross_size < 2 || info.local_size < 2 || !even_hosts) {
    if (wanted && info.cross_size > 1 && !even_hosts && info.rank == 0) {
      HORO_LOG(kLogInfo, "hosts run " << -sizes[1] << " to " << sizes[0]
                                      << " ranks each: hierarchical collectives need the same number, using flat ones");
    }
    std::unique_ptr<Transport> chosen = choose_transport(std::move(flat));
    *description = chosen->shm() ? "shm" : "mpi";
    return chosen;
  }
  MPI_Comm local, cross;
  mpi_check(MPI_Comm_split_type(ours, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  mpi_check(MPI_Comm_split(ours, info.local_rank, info.rank, &cross), "MPI_Comm_split");
  // The intra-host layer is whatever serves one host best (shared memory by default).
  std::unique_ptr<Transport> local_layer = choose_transport(std::make_unique<MpiTransport>(local, settings));
  *description = std::string("hierarchical(local=") + (local_layer->shm() ? "shm" : "mpi") + ",cross=mpi)";
  return std::make_unique<HierarchicalTransport>(std::move(flat), std::move(local_layer),
                                                 std::make_unique<MpiTransport>(cross, settings), tunables);
}

}  // namespace horo
