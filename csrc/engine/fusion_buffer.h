// Tensor fusion: ready responses that can share one collective (same kind,
// dtype, op, scale factors, root and memory) are packed into one buffer up to the
// threshold, reduced once and unpacked, so small tensors do not each pay a
// network round trip.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "transport/transport.h"
#include "wire/messages.h"

namespace horo {

// Groups `responses` (identical on every rank) into fusion groups, `groups`;
// the result is identical on every rank too. Errors, and tensors over
// `max_host_tensor_bytes` (host memory) or `max_tensor_bytes` (GPU memory),
// travel alone. A threshold of 0 disables fusion.
// `groups` is refilled in place, by assignment: given back cycle after
// cycle, a cycle shaped like the last (one small tensor, say) allocates nothing.
void plan_fusion(const std::vector<Response>& responses, size_t threshold_bytes, size_t max_host_tensor_bytes,
                 size_t max_tensor_bytes, std::vector<std::vector<Response>>* groups);

// A grow-only staging buffer, left uninitialised (it is always overwritten).
class FusionBuffer {
 public:
  // From `shared` where it hands out memory the host's peers can write into
  // (transport/shm/heap.h, nullptr where it has none): a fused allreduce or
  // allgather then writes each rank's part straight into its peers' buffers.
  explicit FusionBuffer(OutputAllocator shared) : shared_(std::move(shared)) {}
  char* reserve(size_t bytes);

 private:
  OutputAllocator shared_;
  std::shared_ptr<char> data_;
  size_t capacity_ = 0;
};

}  // namespace horo
