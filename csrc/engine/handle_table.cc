#include "engine/handle_table.h"

#include <atomic>

#include "common/error.h"

namespace horo {

namespace {
// Unique for the whole process, so a handle kept across shutdown and a new
// init() can never be confused with one of the new engine's.
std::atomic<int> g_next_handle{1};
}  // namespace

int HandleTable::create() {
  std::lock_guard<std::mutex> lock(mutex_);
  const int handle = g_next_handle++;
  states_.emplace(handle, State{});
  return handle;
}

void HandleTable::complete(int handle, std::string error, std::shared_ptr<AllocatedOutput> allocated) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(handle);
    if (it == states_.end()) return;
    it->second.done = true;
    it->second.result = Result{std::move(error), std::move(allocated)};
  }
  done_cv_.notify_all();
}

bool HandleTable::poll(int handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it == states_.end()) throw Error("unknown handle " + std::to_string(handle) + " (already synchronized?)");
  return it->second.done;
}

HandleTable::Result HandleTable::wait(int handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it == states_.end()) throw Error("unknown handle " + std::to_string(handle) + " (already synchronized?)");
  done_cv_.wait(lock, [&] { return it->second.done; });
  Result result = std::move(it->second.result);
  states_.erase(it);
  return result;
}

}  // namespace horo
