// Large output buffers handed to callers come back here when the caller
// drops them, and serve the next output of the same size. A fresh 64 MiB
// allocation is mapped page by page on first touch (16k page faults), which
// costs more than moving the data; a recycled one is already mapped. Their
// whole huge pages are advised as such (buffer_pool.cc).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace horo {

class BufferPool {
 public:
  static BufferPool& instance();

  // Uninitialised memory; freed (or kept for reuse) when the last owner lets go.
  std::shared_ptr<char> acquire(size_t bytes);

 private:
  void release(char* data, size_t bytes);

  static constexpr size_t kMinPooledBytes = size_t(1) << 20;  // malloc reuses smaller ones well
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  std::mutex mutex_;
  std::multimap<size_t, char*> free_;  // by size
  size_t cached_bytes_ = 0;
};

}  // namespace horo
