#include "transport/hierarchical_transport.h"
#include "common/copy_bytes.h"

#include <cstring>

#include "common/error.h"
#include "reduce/reduce_kernels.h"

namespace horo {

HierarchicalTransport::HierarchicalTransport(std::unique_ptr<Transport> flat, std::unique_ptr<Transport> local,
                                             std::unique_ptr<Transport> cross, const Tunables& tunables)
    : flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      tunables_(tunables),
      ring_(tunables.ring_chunk_bytes) {
  const int n = flat_->size(), hosts = cross_->size(), per_host = local_->size();
  if (hosts * per_host != n) throw Error("hierarchical transport needs the same number of ranks on every host");
  // A host is known by the cross rank of its local rank 0: cross ranks of other
  // local ranks may order hosts differently when ranks are not mapped by slot.
  int32_t host = cross_->rank();
  local_->broadcast(&host, sizeof host, 0);
  const int32_t mine[3] = {host, local_->rank(), cross_->rank()};
  std::vector<int32_t> all(3 * static_cast<size_t>(n));
  flat_->native_allgatherv(mine, all.data(), std::vector<size_t>(n, sizeof mine));
  host_of_.resize(n);
  local_of_.resize(n);
  cross_of_.resize(n);
  rank_of_.assign(n, -1);
  for (int g = 0; g < n; ++g) {
    host_of_[g] = all[3 * g];
    local_of_[g] = all[3 * g + 1];
    cross_of_[g] = all[3 * g + 2];
    rank_of_[host_of_[g] * per_host + local_of_[g]] = g;
  }
}

bool HierarchicalTransport::chosen(const std::string& mode, size_t bytes, int64_t min_bytes) {
  return mode == "1" || (mode == "auto" && static_cast<int64_t>(bytes) >= min_bytes);
}

bool HierarchicalTransport::two_level_allreduce(size_t bytes) const {
  return chosen(tunables_.hierarchical_allreduce, bytes, tunables_.hierarchical_min_bytes);
}

bool HierarchicalTransport::two_level_allgather(size_t bytes) const {
  return chosen(tunables_.hierarchical_allgather, bytes, tunables_.hierarchical_min_bytes);
}

void HierarchicalTransport::cross_allreduce(char* slice, size_t count, DataType dtype, ReduceOp op) {
  const bool ring = tunables_.allreduce_algo == "ring" ||
                    (tunables_.allreduce_algo == "auto" &&
                     static_cast<int64_t>(count * dtype_size(dtype)) >= tunables_.ring_min_bytes);
  if (ring || !cross_->native_allreduce(slice, slice, count, dtype, op)) {
    ring_.allreduce(*cross_, RingLayout::even(count, cross_->size()), slice, slice, dtype, op);
  }
}

bool HierarchicalTransport::native_allreduce(const void* input, void* output, size_t count, DataType dtype,
                                             ReduceOp op) {
  if (!two_level_allreduce(count * dtype_size(dtype))) return flat_->native_allreduce(input, output, count, dtype, op);
  const RingLayout layout = slices(count);
  const int me = local_->rank();
  char* out = static_cast<char*>(output);
  char* slice = out + layout.offset[me] * dtype_size(dtype);
  // The ring's reduce-scatter leaves slice `me` in place, fully reduced over this host.
  ring_.reduce_scatter(*local_, layout, input, output, dtype, op);
  cross_allreduce(slice, layout.count[me], dtype, op);
  ring_.allgather(*local_, layout, slice, output, dtype);
  return true;
}

void HierarchicalTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  size_t total = 0;
  for (size_t b : byte_counts) total += b;
  if (!two_level_allgather(total)) return flat_->native_allgatherv(mine, output, byte_counts);
  const int per_host = local_->size(), hosts = cross_->size();
  // 1. Across hosts, among the ranks with my local rank: their blocks, host by host.
  std::vector<size_t> cross_bytes(hosts);
  for (int h = 0; h < hosts; ++h) cross_bytes[cross_of_[rank_at(h, local_->rank())]] = byte_counts[rank_at(h, local_->rank())];
  size_t collected = 0;
  for (size_t b : cross_bytes) collected += b;
  collected_.resize(collected);
  cross_->native_allgatherv(mine, collected_.data(), cross_bytes);
  // 2. On this host: every local rank's collection.
  std::vector<size_t> local_bytes(per_host, 0);
  for (int g = 0; g < size(); ++g) local_bytes[local_of_[g]] += byte_counts[g];
  gathered_.resize(total);
  local_->native_allgatherv(collected_.data(), gathered_.data(), local_bytes);
  // 3. Into global rank order: local rank k's collection holds its cross peers in cross-rank order.
  std::vector<size_t> offset(size(), 0);
  for (int g = 1; g < size(); ++g) offset[g] = offset[g - 1] + byte_counts[g - 1];
  const char* from = gathered_.data();
  for (int k = 0; k < per_host; ++k) {
    std::vector<int> peers(hosts);
    for (int h = 0; h < hosts; ++h) peers[cross_of_[rank_at(h, k)]] = rank_at(h, k);
    for (int g : peers) {
      copy_bytes(static_cast<char*>(output) + offset[g], from, byte_counts[g]);
      from += byte_counts[g];
    }
  }
}

void HierarchicalTransport::broadcast(void* buf, size_t bytes, int root) {
  if (!two_level_allreduce(bytes)) return flat_->broadcast(buf, bytes, root);
  const int root_host = host_of_[root];
  const int me = local_->rank();
  const bool on_root_host = host_of_[rank()] == root_host;
  // 1. The root's host gets the whole buffer over the (cheap) intra-host layer.
  if (on_root_host) local_->broadcast(buf, bytes, local_of_[root]);
  // 2. Slice k crosses the network from the root host's local rank k to its cross peers.
  const RingLayout layout = slices(bytes);
  char* slice = static_cast<char*>(buf) + layout.offset[me];
  cross_->broadcast(slice, layout.count[me], cross_of_[rank_at(root_host, me)]);
  // 3. Other hosts assemble the slices.
  if (!on_root_host) ring_.allgather(*local_, layout, slice, buf, DataType::kUInt8);
}

}  // namespace horo
