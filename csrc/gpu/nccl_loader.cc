#include "gpu/nccl_loader.h"

#include "common/error.h"
#include "gpu/dynamic_library.h"

namespace horo::nccl {

namespace {

LazyLibrary& library() {
  static LazyLibrary lib("NCCL (libnccl.so.2)", "HORO_NCCL_LIB");
  return lib;
}

const std::vector<LibraryCandidate>& defaults() {
  static const std::vector<LibraryCandidate> list = {
      {"libnccl.so.2", "already loaded in this process", true},
      {"libnccl.so.2", "system loader path"},
  };
  return list;
}

Api g_api;

}  // namespace

void set_wheel_candidates(std::vector<std::string> paths) { library().set_wheel_candidates(std::move(paths)); }

std::string version_string(int v) {
  // NCCL before 2.9 encoded major * 1000 + minor * 100 + patch.
  if (v < 10000) return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

const Api* try_api(std::string* why) {
  void* handle = library().load(defaults(), [](void* h, const std::string& path) {
    const std::string name = "NCCL at " + path;
#define HORO_RESOLVE(symbol, result, params) \
  g_api.symbol = reinterpret_cast<symbol##_t>(library_symbol(h, #symbol, name));
    HORO_NCCL_FUNCTIONS(HORO_RESOLVE)
#undef HORO_RESOLVE
    if (g_api.ncclGetVersion(&g_api.version) != kSuccess) throw Error(name + ": ncclGetVersion failed");
    if (g_api.version < kMinimumVersion) {
      throw Error(name + " is version " + version_string(g_api.version) + "; horo needs " +
                  version_string(kMinimumVersion) + " or later");
    }
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
      HORO_NCCL_FUNCTIONS(HORO_NAME)
#undef HORO_NAME
  };
}

void check(Result result, const char* what) {
  if (result == kSuccess) return;
  throw Error(std::string(what) + " failed: " + api().ncclGetErrorString(result) + " (NCCL error " +
              std::to_string(static_cast<int>(result)) + ")");
}

}  // namespace horo::nccl
