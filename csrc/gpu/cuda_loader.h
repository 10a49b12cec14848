// The CUDA runtime, opened at run time. Search order: HORO_CUDART_LIB; a
// libcudart already in the process (CUDA torch or CuPy loaded one: sharing it
// keeps one runtime per process); the nvidia-cuda-runtime wheels Python
// found; the system loader path.
#pragma once

#include <string>
#include <vector>

#include "gpu/cuda_api.h"

namespace horo::cuda {

struct Api {
#define HORO_TABLE_ENTRY(symbol, result, params) symbol##_t symbol = nullptr;
  HORO_CUDA_FUNCTIONS(HORO_TABLE_ENTRY)
#undef HORO_TABLE_ENTRY
};

void set_wheel_candidates(std::vector<std::string> paths);
// The resolved table; throws horo::Error listing what was tried.
const Api& api();
// The table, or nullptr with the reason.
const Api* try_api(std::string* why);
std::string library_path();
std::vector<std::string> search_order();
std::vector<std::string> symbol_names();

// Throws horo::Error("<what>: <CUDA's message>") unless `result` is success.
void check(Status result, const char* what);
// Visible devices; 0 with the reason where the runtime or the driver is missing.
int device_count(std::string* why);

// Runs a scope on `device`, restoring the caller's current device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace horo::cuda
