// Responses the ranks have already agreed on, each under a bit index. Once a
// tensor's response is cached, a rank announces "ready" by setting its bit in
// the per-cycle bit-vector AND, so steady-state training sends no
// per-tensor messages. Every rank applies the same put/erase/touch sequence
// (all derived from globally agreed data), so the caches stay identical and
// a bit means the same tensor everywhere.
#pragma once

#include <list>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "wire/messages.h"

namespace horo {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity) {}

  enum class Lookup { kMiss, kHit, kStale };  // kStale: same name, other signature
  Lookup lookup(const Request& request, int rank, int size, int* bit) const;

  // The bit caching `name`, whatever its signature; -1 if none.
  int bit_of(const std::string& name) const {
    auto it = bit_of_name_.find(name);
    return it == bit_of_name_.end() ? -1 : it->second;
  }
  const Response& get(int bit) const { return slots_[bit].response; }
  bool contains(int bit) const { return bit < static_cast<int>(slots_.size()) && slots_[bit].used; }
  void touch(int bit);
  // Inserts (or refreshes) a response, evicting the least recently used one when full.
  void put(const Response& response);
  void erase(int bit);
  // Bits in use lie below this bound; identical on every rank.
  int bit_bound() const { return static_cast<int>(slots_.size()); }
  bool enabled() const { return capacity_ > 0; }

 private:
  struct Slot {
    bool used = false;
    Response response;
    std::list<int>::iterator lru_position;
  };
  int capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> bit_of_name_;
  std::list<int> lru_;  // front = most recently used
  std::set<int> free_bits_;
};

}  // namespace horo
