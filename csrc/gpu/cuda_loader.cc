#include "gpu/cuda_loader.h"

#include "common/error.h"
#include "gpu/dynamic_library.h"

namespace horo::cuda {

namespace {

LazyLibrary& library() {
  static LazyLibrary lib("the CUDA runtime (libcudart)", "HORO_CUDART_LIB");
  return lib;
}

// CUDA 13 first, then 12: whichever the installed driver and frameworks use.
const std::vector<LibraryCandidate>& defaults() {
  static const std::vector<LibraryCandidate> list = {
      {"libcudart.so.13", "already loaded in this process", true},
      {"libcudart.so.12", "already loaded in this process", true},
      {"libcudart.so.13", "system loader path"},
      {"libcudart.so.12", "system loader path"},
      {"libcudart.so", "system loader path"},
  };
  return list;
}

Api g_api;

}  // namespace

void set_wheel_candidates(std::vector<std::string> paths) { library().set_wheel_candidates(std::move(paths)); }

const Api* try_api(std::string* why) {
  void* handle = library().load(defaults(), [](void* h, const std::string& path) {
    const std::string name = "the CUDA runtime at " + path;
#define HORO_RESOLVE(symbol, result, params) \
  g_api.symbol = reinterpret_cast<symbol##_t>(library_symbol(h, #symbol, name));
    HORO_CUDA_FUNCTIONS(HORO_RESOLVE)
#undef HORO_RESOLVE
  }, why);
  return handle ? &g_api : nullptr;
}

const Api& api() {
  std::string why;
  const Api* a = try_api(&why);
  if (a == nullptr) throw Error(why);
  return *a;
}

std::string library_path() { return library().path(); }
std::vector<std::string> search_order() { return library().search_order(defaults()); }

std::vector<std::string> symbol_names() {
  return {
#define HORO_NAME(symbol, result, params) #symbol,
      HORO_CUDA_FUNCTIONS(HORO_NAME)
#undef HORO_NAME
  };
}

void check(Status result, const char* what) {
  if (result == kSuccess) return;
  throw Error(std::string(what) + " failed: " + api().cudaGetErrorString(result) + " (CUDA error " +
              std::to_string(static_cast<int>(result)) + ")");
}

int device_count(std::string* why) {
  const Api* a = try_api(why);
  if (a == nullptr) return 0;
  int count = 0;
  const Status result = a->cudaGetDeviceCount(&count);
  if (result != kSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + a->cudaGetErrorString(result);
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount reports no CUDA device";
  return count;
}

DeviceGuard::DeviceGuard(int device) {
  check(api().cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(api().cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (api().cudaGetDevice(&now) == kSuccess && now != previous_) api().cudaSetDevice(previous_);
}

}  // namespace horo::cuda
