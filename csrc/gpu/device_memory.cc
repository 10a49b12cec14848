#include "gpu/device_memory.h"

#include <string>

#include "gpu/cuda_loader.h"

namespace horo {

DeviceMemory::DeviceMemory(int device, size_t bytes) : device_(device), bytes_(bytes) {
  cuda::DeviceGuard on(device);
  void* p = nullptr;
  // cudaMalloc needs a size > 0 to return a usable pointer; an empty buffer is still distinct.
  cuda::check(cuda::api().cudaMalloc(&p, bytes > 0 ? bytes : 1),
              ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  data_ = static_cast<char*>(p);
}

DeviceMemory::~DeviceMemory() {
  // cudaFree waits for work using the memory; a failure here has no one to report to.
  if (data_ != nullptr) cuda::api().cudaFree(data_);
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
