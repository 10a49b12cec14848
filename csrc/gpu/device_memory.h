// Memory the GPU path owns: device allocations (fusion buffer, outputs the
// core sizes, such as allgather's) and pinned host memory (MPI staging, which
// must be page-locked for copies to run asynchronously on a stream).
#pragma once

#include <cstddef>
#include <memory>

namespace horo {

class DeviceMemory {
 public:
  DeviceMemory(int device, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }

 private:
  int device_;
  size_t bytes_;
  char* data_ = nullptr;
};

class PinnedMemory {
 public:
  explicit PinnedMemory(size_t bytes);
  ~PinnedMemory();
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  char* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  char* data_ = nullptr;
};

// Grows (never shrinks) to the largest size asked of it; contents not kept.
template <typename Memory>
class GrowOnly {
 public:
  template <typename... Args>
  char* reserve(size_t bytes, Args... args) {
    if (!memory_ || memory_->size() < bytes) {
      memory_.reset();  // free first: the old and new buffer need not fit together
      memory_ = std::make_unique<Memory>(args..., bytes);
    }
    return memory_->data();
  }

 private:
  std::unique_ptr<Memory> memory_;
};

}  // namespace horo
