#include "transport/shm/cross_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"

namespace horo {

bool cross_memory_works(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Each rank offers one word holding its pid; its neighbour reads it back.
  static uint64_t probe = 0;
  probe = static_cast<uint64_t>(getpid());
  uint64_t mine[2] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(&probe)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm);
  const int peer = (rank + 1) % size;
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(all[2 * peer + 1]), sizeof(got)};
  const ssize_t n = process_vm_readv(static_cast<pid_t>(all[2 * peer]), &local, 1, &remote, 1, 0);
  int ok = (n == static_cast<ssize_t>(sizeof(got)) && got == all[2 * peer]) ? 1 : 0, everyone = 0;
  MPI_Allreduce(&ok, &everyone, 1, MPI_INT, MPI_MIN, comm);
  return everyone == 1;
}

namespace {

// One copy between this process and `pid`, in as many calls as the kernel needs.
void move_peer(bool write, pid_t pid, uint64_t remote, char* local, size_t bytes, int peer_rank) {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      const std::string why = n < 0 ? std::string(strerror(errno)) : std::string("no bytes moved");
      throw Error(std::string(write ? "writing" : "reading") + " rank " + std::to_string(peer_rank) +
                  "'s buffer (pid " + std::to_string(pid) + ") failed: " + why);
    }
    // Partial copies happen at page boundaries the kernel could not pin at once.
    local += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

void read_peer(pid_t pid, uint64_t remote, void* local, size_t bytes, int peer_rank) {
  move_peer(false, pid, remote, static_cast<char*>(local), bytes, peer_rank);
}

void write_peer(pid_t pid, uint64_t remote, const void* local, size_t bytes, int peer_rank) {
  // process_vm_writev only reads the local side.
  move_peer(true, pid, remote, const_cast<char*>(static_cast<const char*>(local)), bytes, peer_rank);
}

}  // namespace horo
