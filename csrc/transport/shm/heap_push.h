// Moves into outputs that lie in their ranks' heaps (shm/heap.h): each rank writes its data
// straight into its peers' outputs with plain stores from its own cache-warm input, one copy and
// no system call, then one step (ShmContext::pushed) says every output is whole.
//
// Eligibility is the one decision that takes a step: every rank says where its output lies in
// its heap (unless this cycle's control step already did, ControlPlane::output_preloaded), and
// the path runs only where every rank's does. Every rank takes that step, so every rank gets the
// same answer; where it is no, the next path runs as if it had not been asked.
#pragma once

#include <cstddef>

#include "transport/shm/calls.h"
#include "transport/shm/context.h"
#include "transport/shm/control_plane.h"

namespace horo {

class HeapPush {
 public:
  static constexpr ShmPath kPath = ShmPath::kHeapPush;
  HeapPush(ShmContext& ctx, ControlPlane& control) : ctx_(ctx), control_(control) {}

  bool eligible(const AllgatherCall& c);
  void run(const AllgatherCall& c);
  bool eligible(const AlltoallCall& c);
  void run(const AlltoallCall& c);
  bool eligible(const GatherCall& c);
  void run(const GatherCall& c);
  bool eligible(const ScatterCall& c);
  void run(const ScatterCall& c);

 private:
  // Whether the policy lets this path run where every output turns out to lie in its heap: only
  // then is the step that finds out taken.
  bool may_run(CollectiveType type, size_t bytes) const { return ctx_.path_eligible(kPath, type, bytes); }
  // shm/policy.h's shares_rooted_move, here.
  bool shares_rooted_move(size_t total) const {
    return horo::shares_rooted_move(ctx_.thresholds(), total, ctx_.size(), ctx_.cross_memory());
  }

  ShmContext& ctx_;
  ControlPlane& control_;
  // alltoall: eligible() found the outputs located by the control step, where each peer's
  // recv_at is in its preload area rather than its slot.
  bool located_by_control_ = false;
};

}  // namespace horo
