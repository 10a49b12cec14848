#include "transport/shm_transport.h"

#include <utility>

#include "common/copy_bytes.h"
#include "reduce/reduce_kernels.h"

namespace horo {

namespace {

// Whether `Paths` are the policy's order for `type` (shm_path_order), the order its tests check.
template <class... Paths>
constexpr bool in_policy_order(CollectiveType type) {
  const ShmPath asked[] = {Paths::kPath...};
  const ShmPathOrder order = shm_path_order(type);
  if (order.count != static_cast<int>(sizeof...(Paths))) return false;
  for (int i = 0; i < order.count; ++i) {
    if (asked[i] != order.paths[i]) return false;
  }
  return true;
}

// Runs `call` (a `type` collective, or `also`) on the first of `paths` eligible for it, in the
// order given (the last one always is). Every rank asks the same paths in the same order and gets
// the same answer, so every rank takes the same steps. Resolved at compile time: no virtual call,
// no list to walk.
template <CollectiveType type, CollectiveType also = type, class Call, class... Paths>
void run_first_eligible(const Call& call, Paths&... paths) {
  static_assert(in_policy_order<Paths...>(type) && in_policy_order<Paths...>(also),
                "a collective asks its paths in the policy's order (shm_path_order)");
  (void)((paths.eligible(call) ? (paths.run(call), true) : false) || ...);
}

}  // namespace

ShmTransport::ShmTransport(std::unique_ptr<MpiTransport> inner)
    : inner_(std::move(inner)),
      ctx_(*inner_),
      control_(ctx_),
      one_step_(ctx_),
      reading_peers_(ctx_),
      heap_push_(ctx_, control_),
      direct_read_(ctx_),
      pipeline_(ctx_) {}

int64_t ShmTransport::preload_bytes(const Request& q, int root_set_rank) const {
  return horo::preload_bytes(ctx_.thresholds(), inner_->settings().tunables, q, rank(), root_set_rank, size(),
                             ctx_.spin_yields());
}

bool ShmTransport::moves_rooted_directly(CollectiveType type, size_t bytes) const {
  return horo::moves_rooted_directly(ctx_.thresholds(), type, bytes, size(), ctx_.path_conditions());
}

bool ShmTransport::reduce_for(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                              double scale, int root) {
  if (op == ReduceOp::kAdasum) return false;
  const ReduceCall call{static_cast<const char*>(input), static_cast<char*>(output), count, dtype, op, scale, root};
  if (count == 0) return true;
  if (size() == 1) {
    copy_scaled(dtype, call.out, call.in, count, scale);
    return true;
  }
  run_first_eligible<CollectiveType::kAllreduce, CollectiveType::kReduce>(call, one_step_, reading_peers_, pipeline_);
  return true;
}

bool ShmTransport::native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts,
                                         DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAdasum) return false;
  run_first_eligible<CollectiveType::kReducescatter>(ReduceScatterCall(input, output, counts, dtype, op),
                                                     reading_peers_, pipeline_);
  return true;
}

void ShmTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  const AllgatherCall call(mine, output, byte_counts);
  const size_t own = byte_counts[rank()];
  char* at = call.out + call.offset[rank()];
  if (call.mine != at && own) ctx_.copy_own(at, call.mine, own);
  run_first_eligible<CollectiveType::kAllgather>(call, heap_push_, direct_read_, pipeline_);
}

void ShmTransport::gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) {
  const GatherCall call(mine, output, byte_counts, root);
  if (rank() == root && byte_counts[root]) copy_bytes(call.out + call.offset[root], call.mine, byte_counts[root]);
  run_first_eligible<CollectiveType::kGather>(call, heap_push_, direct_read_, pipeline_);
}

void ShmTransport::scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) {
  const ScatterCall call(input, byte_counts, mine, root);
  if (rank() == root && byte_counts[root]) copy_bytes(call.mine, call.in + call.offset[root], byte_counts[root]);
  run_first_eligible<CollectiveType::kScatter>(call, heap_push_, direct_read_, pipeline_);
}

void ShmTransport::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                             const std::vector<size_t>& recv_bytes) {
  const AlltoallCall call(input, send_bytes, output, recv_bytes);
  const int me = rank();
  if (send_bytes[me]) ctx_.copy_own(call.out + call.recv_at[me], call.in + call.send_at[me], send_bytes[me]);
  // Pairs too large for the segment are read directly within the pipeline's rounds.
  run_first_eligible<CollectiveType::kAlltoall>(call, heap_push_, pipeline_);
}

void ShmTransport::broadcast(void* buf, size_t bytes, int root) {
  run_first_eligible<CollectiveType::kBroadcast>(BroadcastCall{static_cast<char*>(buf), bytes, root}, direct_read_,
                                                 pipeline_);
}

}  // namespace horo
