// Single-copy reads from a peer process's memory (Linux cross-memory attach,
// process_vm_readv), and writes into it (process_vm_writev): a receiver copies
// straight out of the sender's buffer, instead of the sender copying into the
// shared segment and the receiver out of it. Open MPI's smsc/cma does the same
// for large messages. It needs the right to ptrace the peer (same user, Yama
// permitting) and a seccomp policy that allows the call, so the ranks probe it
// together and fall back to the segment when any of them cannot.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace horo {

// Collective over `comm`: true on every rank when every rank could read a
// word from its neighbour's memory.
bool cross_memory_works(MPI_Comm comm);

// Copies `bytes` from `remote` in process `pid` to `local`; throws
// horo::Error naming the peer rank if the kernel refuses or the peer is gone.
void read_peer(pid_t pid, uint64_t remote, void* local, size_t bytes, int peer_rank);
// The other way (process_vm_writev): `local` into `remote` in process `pid`.
void write_peer(pid_t pid, uint64_t remote, const void* local, size_t bytes, int peer_rank);

}  // namespace horo
