#include "engine/handle_table.h"

#include <atomic>
#include <chrono>
#include <thread>

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

bool HandleTable::wait_for(int handle, std::chrono::milliseconds timeout, Result* result) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it == states_.end()) throw Error("unknown handle " + std::to_string(handle) + " (already synchronized?)");
  // A reference, not the iterator: other threads insert while we wait, and a
  // rehash moves iterators but never the elements themselves.
  State& state = it->second;
  // Collectives often finish within microseconds: a short spin that yields
  // the core saves the sleep and wake-up round trip before blocking.
  const auto spin_until = std::chrono::steady_clock::now() + spin_;
  while (!state.done && std::chrono::steady_clock::now() < spin_until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  if (!done_cv_.wait_for(lock, timeout, [&] { return state.done; })) return false;
  *result = std::move(state.result);
  states_.erase(handle);
  return true;
}

}  // namespace horo
