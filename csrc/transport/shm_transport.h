// Collectives among the ranks of one host through shared memory, written for it rather than
// ported from the ring. Each collective has a few data paths, one class each in shm/:
//   OneStepReduce       small reductions in one step: every rank reduces everything
//   ReduceReadingPeers  reductions reading each peer's input directly, one copy
//   HeapPush            each rank writes straight into its peers' outputs in their heaps
//   DirectRead          receivers read the senders' buffers directly (process_vm_readv)
//   SegmentPipeline     pieces through the segment's slots: every collective, the fallback
// Each path says whether it is eligible for a call (asking the policy, shm/policy.h:
// shm_path_eligible) and runs it; a collective runs the first eligible path of the policy's order
// for it (shm_path_order). The
// control plane runs through the same slots (ControlPlane), so a steady-state cycle sends no
// MPI message, and a small cached collective's inputs ride its control step (preload).
// Point-to-point (the ring) and split stay on the inner MPI transport.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/mpi_transport.h"
#include "transport/shm/context.h"
#include "transport/shm/control_plane.h"
#include "transport/shm/direct_read.h"
#include "transport/shm/heap_push.h"
#include "transport/shm/one_step_reduce.h"
#include "transport/shm/reduce_reading_peers.h"
#include "transport/shm/segment_pipeline.h"
#include "transport/transport.h"

namespace horo {

class ShmTransport : public Transport, public ShmCapabilities {
 public:
  // Collective over `inner`'s communicator, whose ranks must share this host.
  explicit ShmTransport(std::unique_ptr<MpiTransport> inner);

  int rank() const override { return ctx_.rank(); }
  int size() const override { return ctx_.size(); }
  bool prefers_native() const override { return true; }
  ShmCapabilities* shm() override { return this; }

  int isend(const void* buf, size_t bytes, int peer) override { return inner_->isend(buf, bytes, peer); }
  int irecv(void* buf, size_t bytes, int peer) override { return inner_->irecv(buf, bytes, peer); }
  void wait(int slot) override { inner_->wait(slot); }
  void wait_all() override { inner_->wait_all(); }
  // Users' point-to-point rides the MPI communicator (Open MPI moves it through shared memory on a host).
  int post_send(const void* buf, size_t bytes, int peer, int tag) override {
    return inner_->post_send(buf, bytes, peer, tag);
  }
  int post_recv(void* buf, size_t bytes, int peer, int tag) override { return inner_->post_recv(buf, bytes, peer, tag); }
  bool test_posted(int id, size_t* received) override { return inner_->test_posted(id, received); }
  int max_tag() const override { return inner_->max_tag(); }

  bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) override {
    return native_allreduce_scaled(input, output, count, dtype, op, 1.0);
  }
  bool native_allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                               double scale) override {
    return reduce_for(input, output, count, dtype, op, scale, ReduceCall::kEveryRank);
  }
  bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op) override;
  void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) override;
  void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                 const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) override;
  void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) override;
  bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, int root) override {
    return reduce_for(input, output, count, dtype, op, 1.0, root);
  }
  void barrier() override { ctx_.step(); }
  std::unique_ptr<Transport> split(const std::vector<int>& members) override { return inner_->split(members); }
  OutputAllocator output_allocator() const override { return ctx_.allocate_output(); }

  size_t preload_capacity() const override { return control_.preload_capacity(); }
  int64_t preload_bytes(const Request& q, int root_set_rank) const override;
  void preload(const void* input, size_t bytes, bool rooted) override { control_.preload(input, bytes, rooted); }
  const char* preloaded(int rank) override { return control_.preloaded(rank); }
  bool preload_output(size_t bytes, const std::vector<size_t>& recv_at) override {
    return control_.preload_output(bytes, recv_at);
  }
  std::shared_ptr<char> take_preloaded_output() override { return control_.take_preloaded_output(); }
  void await_preloaded(int rank, size_t bytes) override { control_.await_preloaded(rank, bytes); }
  bool moves_rooted_directly(CollectiveType type, size_t bytes) const override;
  void allreduce_bitand(std::vector<uint64_t>& words) override { control_.allreduce_bitand(words); }
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override {
    return control_.gather_bytes(mine, root);
  }
  void broadcast_bytes(std::string& data, int root) override { control_.broadcast_bytes(data, root); }
  bool wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout,
                      bool spin = true) override {
    ctx_.wait_for_peers(local_work, timeout, spin);
    return true;
  }
  void wake_local() override { ring(ctx_.segment().state(ctx_.rank()).idle); }
  bool watches_peers() const override { return true; }
  bool peers_ahead() override { return ctx_.peers_ahead(); }
  void set_caller_cycles(bool on) override { ctx_.segment().state(ctx_.rank()).caller_cycles.store(on ? 1 : 0); }

 private:
  // Allreduce (root: ReduceCall::kEveryRank) or reduce to `root`.
  bool reduce_for(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, double scale, int root);

  std::unique_ptr<MpiTransport> inner_;
  ShmContext ctx_;  // shared by every path below
  ControlPlane control_;
  OneStepReduce one_step_;
  ReduceReadingPeers reading_peers_;
  HeapPush heap_push_;
  DirectRead direct_read_;
  SegmentPipeline pipeline_;
};

}  // namespace horo
