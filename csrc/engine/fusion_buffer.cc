#include "engine/fusion_buffer.h"

#include <map>
#include <tuple>

#include "common/types.h"

namespace horo {

namespace {
size_t bytes_of(const Request& q) { return static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype); }
}  // namespace

std::vector<std::vector<Response>> plan_fusion(std::vector<Response> responses, size_t threshold_bytes,
                                               size_t max_tensor_bytes) {
  std::vector<std::vector<Response>> groups;
  // A group of its own, moved in (a braced list would copy the response: its strings and vectors).
  auto alone = [&groups](Response&& response) {
    groups.emplace_back();
    groups.back().push_back(std::move(response));
  };
  if (responses.size() == 1) {  // the common small cycle: nothing to fuse with
    groups.push_back(std::move(responses));
    return groups;
  }
  using Key = std::tuple<CollectiveType, DataType, ReduceOp, double, double, int32_t, Memory>;
  std::map<Key, size_t> open;  // key -> index into groups of the group still filling
  std::vector<size_t> filled(0);
  for (Response& response : responses) {
    const Request& q = response.request;
    // Only these have a fused form; errors and preloaded inputs travel alone.
    const bool fusable = q.type == CollectiveType::kAllreduce || q.type == CollectiveType::kAllgather ||
                         q.type == CollectiveType::kReducescatter || q.type == CollectiveType::kBroadcast;
    // A large tensor's own collective is bandwidth-bound already: staging it
    // through the fusion buffer would only add two copies of it.
    if (response.kind != Response::Kind::kExecute || threshold_bytes == 0 || !fusable || response.preloaded ||
        bytes_of(q) > max_tensor_bytes) {
      alone(std::move(response));
      filled.push_back(0);
      continue;
    }
    const Key key{q.type, q.dtype, q.op, q.prescale, q.postscale, q.root, q.memory};
    const size_t bytes = bytes_of(q);
    auto it = open.find(key);
    if (it != open.end() && filled[it->second] + bytes <= threshold_bytes) {
      groups[it->second].push_back(std::move(response));
      filled[it->second] += bytes;
      continue;
    }
    open[key] = groups.size();
    alone(std::move(response));
    filled.push_back(bytes);
  }
  return groups;
}

char* FusionBuffer::reserve(size_t bytes) {
  if (bytes > capacity_) {
    data_.reset(new char[bytes]);
    capacity_ = bytes;
  }
  return data_.get();
}

}  // namespace horo
