// Integer handles the caller holds while a collective is in flight.
// The background thread completes them; callers poll or block on them.
#pragma once

#include <chrono>
#include <functional>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/node_pool.h"
#include "engine/tensor_queue.h"

namespace horo {

class HandleTable {
 public:
  struct Result {
    std::string error;  // empty on success
    std::shared_ptr<AllocatedOutput> allocated;
  };
  // Runs on the completing thread instead of a later wait() (native framework
  // ops finish from it); the handle is forgotten before it runs.
  using Callback = std::function<void(Result&&)>;
  int create(Callback on_complete = nullptr);
  // Drops a handle whose entry never reached the queue, without calling its callback.
  void forget(int handle);
  // An empty `error` means success.
  void complete(int handle, std::string error, std::shared_ptr<AllocatedOutput> allocated = nullptr);
  // Throws horo::Error for a handle that does not exist (or was synchronised).
  // `forgotten_is_done`: a callback handle is forgotten once complete, so absent means done.
  bool poll(int handle, bool forgotten_is_done = false);
  // Waits up to `timeout` for the handle. Once it has completed: forgets it,
  // moves its result into `result` and returns true. Callers wait in slices
  // so a Python signal (Ctrl-C, SIGALRM) can interrupt them in between.
  bool wait_for(int handle, std::chrono::milliseconds timeout, Result* result);
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }
  // Runs in complete() before the handle reads as done, so whatever it frees
  // (the tensor's name) is free by the time any caller sees the completion.
  void set_before_done(std::function<void(int)> fn) { before_done_ = std::move(fn); }

 private:
  struct State {
    bool done = false;
    Result result;
    Callback on_complete;
  };
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::unordered_map<int, State> states_;
  NodePool<std::unordered_map<int, State>> nodes_;
  std::chrono::microseconds spin_{0};
  std::function<void(int)> before_done_;
};

}  // namespace horo
