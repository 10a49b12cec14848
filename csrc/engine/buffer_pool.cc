#include "engine/buffer_pool.h"

namespace horo {

BufferPool& BufferPool::instance() {
  // Never destroyed: buffers may come back from Python during interpreter teardown.
  static BufferPool* pool = new BufferPool();
  return *pool;
}

std::shared_ptr<char> BufferPool::acquire(size_t bytes) {
  if (bytes < kMinPooledBytes) return std::shared_ptr<char>(new char[bytes > 0 ? bytes : 1], std::default_delete<char[]>());
  char* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      data = it->second;
      free_.erase(it);
      cached_bytes_ -= bytes;
    }
  }
  if (data == nullptr) data = new char[bytes];
  return std::shared_ptr<char>(data, [this, bytes](char* p) { release(p, bytes); });
}

void BufferPool::release(char* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Keep the most recent buffers; beyond the cap, give the oldest back.
  free_.emplace(bytes, data);
  cached_bytes_ += bytes;
  while (cached_bytes_ > kMaxCachedBytes && !free_.empty()) {
    auto largest = std::prev(free_.end());
    cached_bytes_ -= largest->first;
    delete[] largest->second;
    free_.erase(largest);
  }
}

}  // namespace horo
