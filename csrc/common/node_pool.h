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

  // Inserts (key, value) by swapping `value` in; where a node was kept, `value`
  // comes back holding the kept value (see erase_keeping_value()), buffers and all.
  template <typename K>
  typename Map::iterator insert_swapped(Map& map, K&& key, typename Map::mapped_type& value) {
    if (free_.empty()) {
      auto it = map.emplace(std::forward<K>(key), typename Map::mapped_type{}).first;
      std::swap(it->second, value);
      return it;
    }
    typename Map::node_type node = std::move(free_.back());
    free_.pop_back();
    node.key() = std::forward<K>(key);
    std::swap(node.mapped(), value);
    return map.insert(std::move(node)).position;
  }

  // Erases `it`; its value is reset first (it may hold a buffer or a callback).
  void erase(Map& map, typename Map::iterator it) {
    typename Map::node_type node = map.extract(it);
    if (free_.size() >= kKeep) return;
    node.mapped() = typename Map::mapped_type{};
    free_.push_back(std::move(node));
  }

  // Erases `it`, keeping its value as it is for insert_swapped() to hand out
  // (the caller has swapped out what it wanted and left a value whose buffers are worth keeping).
  void erase_keeping_value(Map& map, typename Map::iterator it) {
    typename Map::node_type node = map.extract(it);
    if (free_.size() < kKeep) free_.push_back(std::move(node));
  }

 private:
  static constexpr size_t kKeep = 256;  // beyond a burst's worth, nodes go back to the allocator
  std::vector<typename Map::node_type> free_;
};

}  // namespace horo
