// Every collective through the segment's slots, in pieces: in each round every sender copies a
// piece into its slot, one step, then every receiver copies (or reduces) what it needs straight
// out of its peers' slots. Rounds alternate between the halves of each slot, so a sender fills
// one half while its receivers empty the other. The path every call can take, and the one the
// others fall back on.
//
// Allreduce is a single-copy reduce-scatter (rank r reduces slice r from every peer's piece) plus
// an all-gather by copy, piece by piece so the data stays in cache (the shape of DeepSpeed's CPU
// shm allreduce and Open MPI's coll/xhc). Where every output lies in its rank's heap, the reduced
// slices are pushed into the peers' outputs instead of copied out of the slots; an alltoall's
// pairs large enough are read directly from their senders (the other pairs' sizes are known
// only at their two ends, so that is decided pair by pair).
#pragma once

#include <cstddef>

#include "transport/shm/calls.h"
#include "transport/shm/context.h"

namespace horo {

class SegmentPipeline {
 public:
  static constexpr ShmPath kPath = ShmPath::kSegmentPipeline;
  explicit SegmentPipeline(ShmContext& ctx) : ctx_(ctx) {}

  // Every call (shm_path_eligible says so too): the path the others fall back on.
  template <class Call>
  bool eligible(const Call&) const {
    return true;
  }
  void run(const ReduceCall& c);
  void run(const ReduceScatterCall& c);
  void run(const AllgatherCall& c);
  void run(const GatherCall& c);
  void run(const ScatterCall& c);
  void run(const AlltoallCall& c);
  void run(const BroadcastCall& c);

 private:
  // Bytes per round of a move (broadcast, allgather, gather, scatter) whose largest part is `largest`.
  size_t move_piece(size_t largest) const;

  ShmContext& ctx_;
};

}  // namespace horo
