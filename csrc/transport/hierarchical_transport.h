// Two-level collectives for jobs that span hosts, as a Transport composed of
// three it owns: `flat` (every rank; point-to-point, the control plane and
// every collective without a two-level form), `local` (the ranks on this
// host) and `cross` (the ranks with this rank's local rank, one per host).
// Any Transport serves as a layer: today all three are MPI communicators; an
// intra-host shared-memory transport can be passed as `local` unchanged.
//
// allreduce: local reduce-scatter -> cross-host allreduce of this rank's
//   slice (every local rank drives the network at once, on 1/L of the data)
//   -> local all-gather. Each slice is reduced on one path, so every rank
//   ends with bit-identical values.
// allgatherv: cross-host allgather of this rank's block among its cross
//   peers -> local allgather of what each local rank collected.
// broadcast: root scatters its buffer over its host's ranks -> each slice is
//   broadcast across hosts by the rank holding it -> local all-gather.
// Needs the same number of ranks on every host (the factory checks).
#pragma once

#include <memory>
#include <vector>

#include "collectives/ring.h"
#include "common/tunables.h"
#include "transport/transport.h"

namespace horo {

class HierarchicalTransport : public Transport {
 public:
  // Collective over `flat` (exchanges every rank's place in the topology).
  HierarchicalTransport(std::unique_ptr<Transport> flat, std::unique_ptr<Transport> local,
                        std::unique_ptr<Transport> cross, const Tunables& tunables);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }

  int isend(const void* buf, size_t bytes, int peer) override { return flat_->isend(buf, bytes, peer); }
  int irecv(void* buf, size_t bytes, int peer) override { return flat_->irecv(buf, bytes, peer); }
  void wait(int slot) override { flat_->wait(slot); }
  void wait_all() override { flat_->wait_all(); }
  // Users' point-to-point rides the MPI communicator (Open MPI moves it through shared memory on a host).
  int post_send(const void* buf, size_t bytes, int peer, int tag) override {
    return flat_->post_send(buf, bytes, peer, tag);
  }
  int post_recv(void* buf, size_t bytes, int peer, int tag) override { return flat_->post_recv(buf, bytes, peer, tag); }
  bool test_posted(int id, size_t* received) override { return flat_->test_posted(id, received); }
  int max_tag() const override { return flat_->max_tag(); }

  bool two_level_allreduce(size_t bytes) const override;
  bool two_level_allgather(size_t bytes) const override;
  bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) override;
  bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op) override {
    return flat_->native_reduce_scatter(input, output, counts, dtype, op);
  }
  void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) override;
  void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                 const std::vector<size_t>& recv_bytes) override {
    flat_->alltoallv(input, send_bytes, output, recv_bytes);
  }
  void broadcast(void* buf, size_t bytes, int root) override;
  void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) override {
    flat_->gatherv(mine, output, byte_counts, root);
  }
  void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) override {
    flat_->scatterv(input, byte_counts, mine, root);
  }
  bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                     int root) override {
    return flat_->native_reduce(input, output, count, dtype, op, root);
  }
  void barrier() override { flat_->barrier(); }
  std::unique_ptr<Transport> split(const std::vector<int>& members) override { return flat_->split(members); }

  void allreduce_bitand(std::vector<uint64_t>& words) override { flat_->allreduce_bitand(words); }
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override {
    return flat_->gather_bytes(mine, root);
  }
  void broadcast_bytes(std::string& data, int root) override { flat_->broadcast_bytes(data, root); }

 private:
  // "1": always two-level; "auto": from HORO_HIERARCHICAL_MIN_BYTES up; "0": never.
  static bool chosen(const std::string& mode, size_t bytes, int64_t min_bytes);
  // The global rank on `host` with local rank `local_rank`.
  int rank_at(int host, int local_rank) const { return rank_of_[host * local_->size() + local_rank]; }
  // Where `bytes` split over this host's ranks puts local rank k's slice.
  RingLayout slices(size_t count) const { return RingLayout::even(count, local_->size()); }
  // Cross-host allreduce of one slice, in place.
  void cross_allreduce(char* slice, size_t count, DataType dtype, ReduceOp op);

  std::unique_ptr<Transport> flat_, local_, cross_;
  const Tunables tunables_;
  Ring ring_;
  // Global rank -> host index (the cross rank of the host's local rank 0), local
  // rank, and cross rank (its place among the ranks with its local rank).
  std::vector<int> host_of_, local_of_, cross_of_;
  std::vector<int> rank_of_;  // host * local_size + local rank -> global rank
  std::vector<char> collected_, gathered_;  // allgatherv staging
};

}  // namespace horo
