// Each rank's heap of memory that its peers on the host can write into. The
// outputs the core allocates (allgather, alltoall) come from here, so an
// exchange pushes each rank's data straight into its peers' outputs: one copy,
// as MPI's single-copy (CMA) path makes, but with plain stores from the
// sender's own cache-warm input instead of a system call that pins the pages
// of a buffer another core just wrote.
//
// A memfd per rank, sparse (pages exist once touched): it is not bounded by
// /dev/shm's size, has no name to leak, and is gone with the last process that
// maps it. Peers open it through /proc/<pid>/fd. Where any rank cannot, every
// rank goes without, and the exchanges move through the segment as before.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace horo {

class ShmHeap {
 public:
  // Where locate() finds no heap memory.
  static constexpr uint64_t kNowhere = ~uint64_t(0);

  // Collective over `comm` (every rank on this host); `bytes` is this rank's own
  // heap (0: none for anyone). Never throws for want of a heap: enabled() says.
  ShmHeap(MPI_Comm comm, size_t bytes);
  ~ShmHeap();
  ShmHeap(const ShmHeap&) = delete;
  ShmHeap& operator=(const ShmHeap&) = delete;

  // The same answer on every rank.
  bool enabled() const { return own_ != nullptr; }
  // Uninitialised memory from this rank's heap, given back when the last owner
  // lets go; nullptr when it is full, or disabled. The allocator and what it
  // hands out may outlive this object.
  std::function<std::shared_ptr<char>(size_t bytes)> allocator() const;
  // Offset of [p, p + bytes) in this rank's heap, or kNowhere. An empty range is
  // everywhere: no peer writes into it.
  uint64_t locate(const void* p, size_t bytes) const;
  // Rank r's heap as mapped here.
  char* of(int rank) const { return mapped_[rank]; }

 private:
  // This rank's heap: outlives the transport while callers hold outputs from it.
  class Arena;
  static std::shared_ptr<char> allocate(const std::shared_ptr<Arena>& arena, size_t bytes);
  std::shared_ptr<Arena> own_;
  std::vector<char*> mapped_;  // every rank's heap, this rank's own included
  std::vector<size_t> sizes_;
};

}  // namespace horo
