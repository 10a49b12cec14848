#include "engine/buffer_pool.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace horo {

namespace {

constexpr uintptr_t kHugePage = uintptr_t(2) << 20;

// Advised as huge pages, as NumPy does for its large arrays: with transparent huge
// pages on "madvise" (Debian's default) a plain allocation gets 4 KiB pages, and
// process_vm_readv into it ran slower. Only the whole huge pages inside the buffer are
// advised: no byte is allocated in vain.
char* allocate_large(size_t bytes) {
  char* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) throw std::bad_alloc();
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return p;
}

}  // namespace

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
  if (data == nullptr) data = allocate_large(bytes);
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
    std::free(largest->second);
    free_.erase(largest);
  }
}

}  // namespace horo
