// The one place that decides what carries a job's global process set: shared
// memory or flat MPI on one host (or with uneven hosts; transport_choice.h),
// the two-level hierarchical transport across hosts, whose intra-host layer is
// chosen the same way (shared memory by default).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "common/tunables.h"
#include "transport/mpi_context.h"
#include "transport/transport.h"

namespace horo {

// Collective over `ours` (which it takes ownership of). `description` gets a
// short name of what was chosen, e.g. "hierarchical(local=mpi,cross=mpi)".
std::unique_ptr<Transport> make_world_transport(MPI_Comm ours, const ProcessInfo& info, const Tunables& tunables,
                                                std::string* description);

}  // namespace horo
