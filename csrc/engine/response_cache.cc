#include "engine/response_cache.h"

namespace horo {

ResponseCache::Lookup ResponseCache::lookup(const Request& request, int rank, int size, int* bit) const {
  auto it = bit_of_name_.find(request.name);
  if (it == bit_of_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  return slots_[it->second].response.answers(request, rank, size) ? Lookup::kHit : Lookup::kStale;
}

void ResponseCache::touch(int bit) {
  Slot& slot = slots_[bit];
  lru_.splice(lru_.begin(), lru_, slot.lru_position);
}

void ResponseCache::put(const Response& response) {
  if (capacity_ <= 0) return;
  auto it = bit_of_name_.find(response.request.name);
  if (it != bit_of_name_.end()) erase(it->second);
  if (static_cast<int>(bit_of_name_.size()) >= capacity_) erase(lru_.back());
  int bit;
  if (!free_bits_.empty()) {
    bit = *free_bits_.begin();
    free_bits_.erase(free_bits_.begin());
  } else {
    bit = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[bit];
  slot.used = true;
  slot.response = response;
  lru_.push_front(bit);
  slot.lru_position = lru_.begin();
  bit_of_name_[response.request.name] = bit;
}

void ResponseCache::erase(int bit) {
  Slot& slot = slots_[bit];
  if (!slot.used) return;
  bit_of_name_.erase(slot.response.request.name);
  lru_.erase(slot.lru_position);
  slot.used = false;
  free_bits_.insert(bit);
}

}  // namespace horo
