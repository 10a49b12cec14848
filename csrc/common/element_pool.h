// Elements dropped from a vector, kept for the next append with their
// strings' and vectors' buffers. The engine's per-cycle lists (new requests,
// pending requests, responses, a group's entries) describe the same tensors
// cycle after cycle: refilled by assignment into kept elements, a cycle of
// the common small collective allocates nothing for them.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace horo {

template <typename T>
class ElementPool {
 public:
  // Appends an element to `v` and returns it: a kept one (stale: assign every
  // field) where there is one, else a default one.
  T& append(std::vector<T>& v) {
    if (kept_.empty()) return v.emplace_back();
    v.push_back(std::move(kept_.back()));  // a move hands the buffers over
    kept_.pop_back();
    return v.back();
  }

  // Drops v's elements from index `size` on, keeping them.
  void truncate(std::vector<T>& v, size_t size) {
    for (size_t i = size; i < v.size() && kept_.size() < kKeep; ++i) kept_.push_back(std::move(v[i]));
    v.resize(size);
  }

  void clear(std::vector<T>& v) { truncate(v, 0); }

 private:
  static constexpr size_t kKeep = 256;  // beyond a burst's worth, elements go back to the allocator
  std::vector<T> kept_;
};

}  // namespace horo
