// The pipelined ring every ring algorithm here is made of.
//
// The buffer is cut into one segment per rank. Reduce-scatter: n-1 steps in
// which each rank sends a segment to its right neighbour and folds the one
// arriving from its left into its own copy, so that rank r ends holding
// segment r reduced over every rank. All-gather: n-1 more steps passing the
// finished segments on. Allreduce is both phases, reducescatter the first,
// allgather the second. Segments travel in chunks small enough to stay in
// L2, and a chunk is sent on the moment it is reduced, so consecutive steps
// overlap instead of waiting for whole segments.
#pragma once

#include <cstddef>
#include <vector>

#include "common/types.h"
#include "transport/transport.h"

namespace horo {

// Where each rank's segment lies in the buffer, in elements.
struct RingLayout {
  std::vector<size_t> offset, count;
  size_t total() const { return count.empty() ? 0 : offset.back() + count.back(); }
  // `elements` split as evenly as possible, the remainder going to the first ranks.
  static RingLayout even(size_t elements, int ranks);
  // Per-rank counts as given (ragged allgather, uneven reducescatter).
  static RingLayout from_counts(const std::vector<size_t>& counts);
  // The same, in place: a layout kept from call to call allocates nothing.
  void assign(const std::vector<size_t>& counts);
};

class Ring {
 public:
  explicit Ring(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  // `input` and `output` span the whole layout (they may be the same buffer).
  // Every rank ends with bit-identical values: each segment is reduced once,
  // in ring order, on one rank, then copied to the others. `scale` (Average's
  // 1/size, a postscale) is applied there too, to each chunk as it is
  // finished, while it is still in cache: no extra pass over the output.
  void allreduce(Transport& t, const RingLayout& layout, const void* input, void* output, DataType dtype,
                 ReduceOp op, double scale = 1.0);
  // After it, output's segment `t.rank()` holds the reduction of that segment
  // over every rank; the other segments of `output` are left as scratch.
  void reduce_scatter(Transport& t, const RingLayout& layout, const void* input, void* output, DataType dtype,
                      ReduceOp op);
  // `mine` holds this rank's segment (it may already lie in `output`);
  // afterwards `output` holds every rank's segment.
  void allgather(Transport& t, const RingLayout& layout, const void* mine, void* output, DataType dtype);

 private:
  enum Phase { kReduceScatter = 1, kAllGather = 2 };
  void run(Transport& t, int phases, const RingLayout& layout, const char* first_send, const char* input,
           char* output, DataType dtype, ReduceOp op, double scale = 1.0);

  static constexpr int kWindow = 4;  // receives posted ahead per step
  size_t chunk_bytes_;
  std::vector<char> scratch_;  // kWindow landing slots for reduce-scatter chunks
};

}  // namespace horo
