// Erased nodes of a node-based map (std::unordered_map), kept for the next
// insert. The tensor queue and the handle table gain and lose an entry per
// collective: without this each one allocates and frees a node, and a
// string key's buffer, every call.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace horo {

template <typename Map>
class NodePool {
 public:
  // Inserts (key, value), in a kept node where there is one; `key` must be absent.
  template <typename K, typename V>
  typename Map::iterator insert(Map& map, K&& key, V&& value) {
    if (free_.empty()) return map.emplace(std::forward<K>(key), std::forward<V>(value)).first;
    typename Map::node_type node = std::move(free_.back());
    free_.pop_back();
    node.key() = std::forward<K>(key);  // a string key reuses its buffer
    node.mapped() = std::forward<V>(value);
    return map.insert(std::move(node)).position;
  }

  // Erases `it`; its value is reset first (it may hold a buffer or a callback).
  void erase(Map& map, typename Map::iterator it) {
    typename Map::node_type node = map.extract(it);
    if (free_.size() >= kKeep) return;
    node.mapped() = typename Map::mapped_type{};
    free_.push_back(std::move(node));
  }

 private:
  static constexpr size_t kKeep = 256;  // beyond a burst's worth, nodes go back to the allocator
  std::vector<typename Map::node_type> free_;
};

}  // namespace horo
