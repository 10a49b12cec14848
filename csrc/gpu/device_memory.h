// Memory the GPU path owns: device allocations (fusion buffer, outputs the
// core sizes, such as allgather's) and pinned host memory (MPI staging, which
// must be page-locked for copies to run asynchronously on a stream).
//
// Device memory is stream-ordered (cudaMallocAsync / cudaFreeAsync): cudaFree
// waits for the whole device, which on the hot path (every allgather output
// dropped by the caller) would stall every stream. An allocation is usable by
// work queued on its stream after it (or ordered after that, as horo's done
// event orders the caller's stream), and is freed in the order of its release
// stream: the caller's stream once the result is handed over, so the caller's
// queued work on it finishes first. Using it on yet another stream needs the
// usual care (torch's record_stream rule). Devices without CUDA's memory pools
// fall back to cudaMalloc / cudaFree.
#pragma once

#include <cstddef>
#include <memory>

#include "gpu/cuda_api.h"

namespace horo {

class DeviceMemory {
 public:
  // Allocated in `stream`'s order, and released in it unless set_release_stream says otherwise.
  DeviceMemory(int device, cuda::Stream stream, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }
  // The stream whose queued work is the last to use this memory (it must outlive the memory).
  void set_release_stream(cuda::Stream stream) { release_stream_ = stream; }

 private:
  int device_;
  size_t bytes_;
  bool stream_ordered_;
  cuda::Stream release_stream_;
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
// A larger DeviceMemory replaces the old in stream order: no device-wide wait.
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
  // Frees now (before the stream the memory is ordered on goes away).
  void release() { memory_.reset(); }

 private:
  std::unique_ptr<Memory> memory_;
};

}  // namespace horo
