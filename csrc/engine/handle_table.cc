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

int HandleTable::create(Callback on_complete) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int handle = g_next_handle++;
  State state;
  state.on_complete = std::move(on_complete);
  nodes_.insert(states_, handle, std::move(state));
  return handle;
}

void HandleTable::forget(int handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it != states_.end()) nodes_.erase(states_, it);
}

void HandleTable::complete(int handle, std::string error, std::shared_ptr<AllocatedOutput> allocated) {
  if (before_done_) before_done_(handle);
  Callback on_complete;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(handle);
    if (it == states_.end()) return;
    if (it->second.on_complete) {
      on_complete = std::move(it->second.on_complete);
      nodes_.erase(states_, it);
    } else {
      it->second.done = true;
      it->second.result = Result{std::move(error), std::move(allocated)};
    }
  }
  // Outside the lock: the callback may submit the next collective.
  if (on_complete) {
    on_complete(Result{std::move(error), std::move(allocated)});
    return;
  }
  done_cv_.notify_all();
}

bool HandleTable::poll(int handle, bool forgotten_is_done) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it == states_.end() && forgotten_is_done) return true;
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
  // the core saves the sleep and wake-up round trip before blocking. (A caller
  // that ran its collective itself finds it done: no clock read, no wait.)
  if (!state.done) {
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    while (!state.done && std::chrono::steady_clock::now() < spin_until) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    if (!done_cv_.wait_for(lock, timeout, [&] { return state.done; })) return false;
  }
  *result = std::move(state.result);
  nodes_.erase(states_, states_.find(handle));
  return true;
}

}  // namespace horo
