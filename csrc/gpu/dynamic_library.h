// A vendor library opened at run time: the first of a list of candidates
// that dlopen accepts, kept open for the life of the process (unloading NCCL
// or the CUDA runtime under live streams is unsafe), with one error message
// that lists every candidate tried and why each failed.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace horo {

struct LibraryCandidate {
  std::string path;    // a file path, or a soname for the system loader path
  std::string origin;  // where the candidate came from, for the error message
  bool already_loaded_only = false;  // RTLD_NOLOAD: only a copy already in the process
};

// Loads one library once, on first use, and resolves its symbol table.
// Thread-safe; a failure is remembered (the search is not repeated).
class LazyLibrary {
 public:
  // `what` names the library in messages ("NCCL"); `env` is its override variable.
  LazyLibrary(std::string what, std::string env) : what_(std::move(what)), env_(std::move(env)) {}

  // Paths found by Python (the nvidia-* wheels' lib/ folders), tried after `env`.
  void set_wheel_candidates(std::vector<std::string> paths);
  // `defaults`: the candidates after the wheels (already-loaded copies, system sonames).
  // `resolve(handle, path)` fills the caller's table; it throws on a missing symbol.
  // Returns the handle, or nullptr with `why` set.
  template <typename Resolve>
  void* load(const std::vector<LibraryCandidate>& defaults, Resolve resolve, std::string* why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!attempted_) {
      attempted_ = true;
      handle_ = open(defaults);
      if (handle_ != nullptr) {
        try {
          resolve(handle_, path_);
        } catch (const std::exception& e) {
          error_ = e.what();
          handle_ = nullptr;
        }
      }
    }
    if (handle_ == nullptr && why != nullptr) *why = error_;
    return handle_;
  }
  // Where the library was found ("" before a successful load).
  std::string path() const;
  // Every candidate in search order, as "origin: path" lines (the same list an error shows).
  std::vector<std::string> search_order(const std::vector<LibraryCandidate>& defaults) const;

 private:
  std::vector<LibraryCandidate> candidates(const std::vector<LibraryCandidate>& defaults) const;
  void* open(const std::vector<LibraryCandidate>& defaults);

  std::string what_, env_;
  mutable std::mutex mutex_;
  std::vector<std::string> wheel_paths_;
  bool attempted_ = false;
  void* handle_ = nullptr;
  std::string path_, error_;
};

// The symbol `name` of an open library; throws horo::Error naming it when absent.
void* library_symbol(void* handle, const char* name, const std::string& library);

}  // namespace horo
