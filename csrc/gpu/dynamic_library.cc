#include "gpu/dynamic_library.h"

#include <dlfcn.h>

#include <cstdlib>

#include "common/error.h"
#include "common/tunables.h"

namespace horo {

void LazyLibrary::set_wheel_candidates(std::vector<std::string> paths) {
  std::lock_guard<std::mutex> lock(mutex_);
  wheel_paths_ = std::move(paths);
}

std::string LazyLibrary::path() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return path_;
}

std::vector<LibraryCandidate> LazyLibrary::candidates(const std::vector<LibraryCandidate>& defaults) const {
  // An explicit override is not second-guessed: if it does not load, that is the error.
  const std::string forced = tunable_value(env_.c_str());
  if (!forced.empty()) return {{forced, env_}};
  std::vector<LibraryCandidate> out;
  for (const auto& c : defaults) {
    if (c.already_loaded_only) out.push_back(c);
  }
  for (const auto& p : wheel_paths_) out.push_back({p, "pip wheel"});
  for (const auto& c : defaults) {
    if (!c.already_loaded_only) out.push_back(c);
  }
  return out;
}

std::vector<std::string> LazyLibrary::search_order(const std::vector<LibraryCandidate>& defaults) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> lines;
  if (tunable_value(env_.c_str()).empty()) lines.push_back(env_ + ": (unset)");
  for (const auto& c : candidates(defaults)) lines.push_back(c.origin + ": " + c.path);
  return lines;
}

void* LazyLibrary::open(const std::vector<LibraryCandidate>& defaults) {
  std::string tried;
  const bool forced = !tunable_value(env_.c_str()).empty();
  for (const auto& c : candidates(defaults)) {
    dlerror();
    // RTLD_GLOBAL: NCCL's plugins (net, tuner) resolve symbols of the library that loaded them.
    void* handle = dlopen(c.path.c_str(), RTLD_NOW | RTLD_GLOBAL | (c.already_loaded_only ? RTLD_NOLOAD : 0));
    if (handle != nullptr) {
      path_ = c.path;
      return handle;
    }
    const char* why = c.already_loaded_only ? "not loaded in this process" : dlerror();
    tried += "\n  " + c.origin + ": " + c.path + " (" + (why ? why : "unknown error") + ")";
  }
  error_ = what_ + " could not be loaded; tried, in order:" + tried;
  error_ += forced ? "\n(" + env_ + " is set, so nothing else was searched; unset it to search the pip wheels and "
                     "the system loader path)"
                   : "\n(set " + env_ + " to the library's path to choose one)";
  return nullptr;
}

void* library_symbol(void* handle, const char* name, const std::string& library) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    const char* why = dlerror();
    throw Error(library + " lacks the symbol " + name + " horo needs (" + (why ? why : "null") +
                "); it may be older than horo supports");
  }
  return symbol;
}

}  // namespace horo
