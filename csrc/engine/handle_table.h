// Integer handles the caller holds while a collective is in flight.
// The background thread completes them; callers poll or block on them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/tensor_queue.h"

namespace horo {

class HandleTable {
 public:
  int create();
  struct Result {
    std::string error;  // empty on success
    std::shared_ptr<AllocatedOutput> allocated;
  };
  // An empty `error` means success.
  void complete(int handle, std::string error, std::shared_ptr<AllocatedOutput> allocated = nullptr);
  // Throws horo::Error for a handle that does not exist (or was synchronised).
  bool poll(int handle);
  // Waits up to `timeout` for the handle. Once it has completed: forgets it,
  // moves its result into `result` and returns true. Callers wait in slices
  // so a Python signal (Ctrl-C, SIGALRM) can interrupt them in between.
  bool wait_for(int handle, std::chrono::milliseconds timeout, Result* result);
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }

 private:
  struct State {
    bool done = false;
    Result result;
  };
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::unordered_map<int, State> states_;
  std::chrono::microseconds spin_{0};
};

}  // namespace horo
