// Makes a step that each rank runs on its own (creating an NCCL communicator,
// finding an NCCL error in flight) collective in outcome: the ranks exchange
// whether theirs failed over the process set's control transport (MPI), and if
// any did, every rank throws the same Error naming each failing rank and its
// reason. NCCL calls that only some ranks reach hang the others; this exchange
// is what lets a failure on one rank end as an exception on all of them.
#pragma once

#include <string>

#include "transport/transport.h"

namespace horo {

// Collective over `control`. `local_error` is "" where this rank's step succeeded.
// Returns normally on every rank, or throws Error("<what> failed on rank(s) ...") on every rank.
// One bitwise-AND allreduce when all succeeded; a gather and a broadcast of the reasons otherwise.
void agree_outcome(Transport& control, const std::string& local_error, const std::string& what);

}  // namespace horo
