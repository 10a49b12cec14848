#include "gpu/device_memory.h"

#include <atomic>
#include <string>

#include "gpu/cuda_loader.h"

namespace horo {

namespace {

// Whether `device` has CUDA's stream-ordered allocator (CUDA 11.2+ drivers; not every
// platform, e.g. some vGPU setups): asked once per device, then remembered.
bool stream_ordered(int device) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices];  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= kDevices) return false;
  int answer = known[device].load(std::memory_order_relaxed);
  if (answer == 0) {
    int supported = 0;
    const bool asked = cuda::api().cudaDeviceGetAttribute(&supported, cuda::kDevAttrMemoryPoolsSupported, device) ==
                       cuda::kSuccess;
    answer = asked && supported ? 1 : 2;
    known[device].store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
}

}  // namespace

DeviceMemory::DeviceMemory(int device, cuda::Stream stream, size_t bytes)
    : device_(device), bytes_(bytes), stream_ordered_(stream_ordered(device)), release_stream_(stream) {
  cuda::DeviceGuard on(device);
  void* p = nullptr;
  // A size > 0 returns a usable pointer; an empty buffer is still distinct.
  const size_t size = bytes > 0 ? bytes : 1;
  const std::string what = (stream_ordered_ ? "cudaMallocAsync of " : "cudaMalloc of ") + std::to_string(bytes) + " bytes";
  cuda::check(stream_ordered_ ? cuda::api().cudaMallocAsync(&p, size, stream) : cuda::api().cudaMalloc(&p, size),
              what.c_str());
  data_ = static_cast<char*>(p);
}

DeviceMemory::~DeviceMemory() {
  if (data_ == nullptr) return;
  // A failure here has no one to report to; cudaFree (which waits for the device) is the fallback.
  cuda::DeviceGuard on(device_);
  if (stream_ordered_ && cuda::api().cudaFreeAsync(data_, release_stream_) == cuda::kSuccess) return;
  cuda::api().cudaFree(data_);
}

PinnedMemory::PinnedMemory(size_t bytes) : bytes_(bytes) {
  void* p = nullptr;
  cuda::check(cuda::api().cudaMallocHost(&p, bytes > 0 ? bytes : 1),
              ("cudaMallocHost of " + std::to_string(bytes) + " bytes").c_str());
  data_ = static_cast<char*>(p);
}

PinnedMemory::~PinnedMemory() {
  if (data_ != nullptr) cuda::api().cudaFreeHost(data_);
}

}  // namespace horo
