// Moves whose receivers read the senders' buffers directly (process_vm_readv, as Open MPI's
// smsc/cma does): one copy, where the segment's slots take two. One step publishes every
// rank's buffer, the receivers copy, and a last step (finish_reads) frees the buffers and
// carries any failure to every rank. For buffers outside the heaps; heap_push.h covers those.
#pragma once

#include <chrono>
#include <cstddef>

#include "transport/shm/cached_reads.h"
#include "transport/shm/calls.h"
#include "transport/shm/context.h"

namespace horo {

class DirectRead {
 public:
  static constexpr ShmPath kPath = ShmPath::kDirectRead;
  explicit DirectRead(ShmContext& ctx) : ctx_(ctx) {}

  // An exchange decides on its largest part, which every rank knows: the most any rank reads
  // from one peer; a gather or scatter on its whole size.
  bool eligible(const AllgatherCall& c) const { return ctx_.path_eligible(kPath, CollectiveType::kAllgather, c.largest); }
  void run(const AllgatherCall& c);
  bool eligible(const GatherCall& c) const { return ctx_.path_eligible(kPath, CollectiveType::kGather, c.total); }
  void run(const GatherCall& c);
  bool eligible(const ScatterCall& c) const { return ctx_.path_eligible(kPath, CollectiveType::kScatter, c.total); }
  void run(const ScatterCall& c);
  bool eligible(const BroadcastCall& c) const {
    return ctx_.path_eligible(kPath, CollectiveType::kBroadcast, c.bytes);
  }
  void run(const BroadcastCall& c);

 private:
  ShmContext& ctx_;
  // A broadcast's receiver whose last read of the root's buffer found its lines cached reads the
  // whole of it the next time; which read that was, and what it found.
  struct RootRead {
    const void* buffer = nullptr;
    size_t bytes = 0;
    int root = -1;
    bool cached = false;
    bool same(const RootRead& o) const { return buffer == o.buffer && bytes == o.bytes && root == o.root; }
  } last_root_read_;
  CachedReads cached_reads_;
};

}  // namespace horo
