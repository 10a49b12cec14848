#include "engine/fusion_buffer.h"

#include <map>
#include <tuple>

#include "common/types.h"

namespace horo {

namespace {
size_t bytes_of(const Request& q) { return static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype); }
}  // namespace

void plan_fusion(const std::vector<Response>& responses, size_t threshold_bytes, size_t max_host_tensor_bytes,
                 size_t max_tensor_bytes, std::vector<std::vector<Response>>* groups) {
  if (responses.size() == 1) {  // the common small cycle: nothing to fuse with
    groups->resize(1);
    groups->front().resize(1);
    groups->front().front() = responses.front();
    return;
  }
  // Each response's group, in order of the groups' first responses.
  std::vector<size_t> group_of(responses.size());
  std::vector<size_t> sizes, filled;
  using Key = std::tuple<CollectiveType, DataType, ReduceOp, double, double, int32_t, Memory>;
  std::map<Key, size_t> open;  // key -> the group still filling
  auto alone = [&](size_t i, size_t bytes) {
    group_of[i] = sizes.size();
    sizes.push_back(1);
    filled.push_back(bytes);
  };
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& response = responses[i];
    const Request& q = response.request;
    // Only these have a fused form; errors and preloaded inputs travel alone.
    const bool fusable = q.type == CollectiveType::kAllreduce || q.type == CollectiveType::kAllgather ||
                         q.type == CollectiveType::kReducescatter || q.type == CollectiveType::kBroadcast;
    // A large tensor's own collective is bandwidth-bound already: staging it
    // through the fusion buffer would only add two copies of it.
    const size_t max_bytes = q.memory == Memory::kHost ? max_host_tensor_bytes : max_tensor_bytes;
    if (response.kind != Response::Kind::kExecute || threshold_bytes == 0 || !fusable || response.preloaded ||
        bytes_of(q) > max_bytes) {
      alone(i, 0);
      continue;
    }
    const Key key{q.type, q.dtype, q.op, q.prescale, q.postscale, q.root, q.memory};
    const size_t bytes = bytes_of(q);
    auto it = open.find(key);
    if (it != open.end() && filled[it->second] + bytes <= threshold_bytes) {
      group_of[i] = it->second;
      ++sizes[it->second];
      filled[it->second] += bytes;
      continue;
    }
    open[key] = sizes.size();
    alone(i, bytes);
  }
  groups->resize(sizes.size());
  for (size_t g = 0; g < sizes.size(); ++g) {
    (*groups)[g].resize(sizes[g]);
    sizes[g] = 0;  // from here on: how many are in
  }
  for (size_t i = 0; i < responses.size(); ++i) {
    const size_t g = group_of[i];
    (*groups)[g][sizes[g]++] = responses[i];
  }
}

char* FusionBuffer::reserve(size_t bytes) {
  if (bytes > capacity_) {
    data_.reset();  // given back first: the heap may hand the same memory out again
    if (shared_) data_ = shared_(bytes);
    if (!data_) data_ = std::shared_ptr<char>(new char[bytes], std::default_delete<char[]>());
    capacity_ = bytes;
  }
  return data_.get();
}

}  // namespace horo
