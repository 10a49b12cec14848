// Integer handles the caller holds while a collective is in flight.
// The background thread completes them; callers poll or block on them.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>

namespace horo {

class HandleTable {
 public:
  int create();
  // An empty `error` means success.
  void complete(int handle, std::string error);
  // Throws horo::Error for a handle that does not exist (or was synchronised).
  bool poll(int handle);
  // Blocks until the handle completes, forgets it, returns its error ("" = ok).
  std::string wait(int handle);

 private:
  struct State {
    bool done = false;
    std::string error;
  };
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::unordered_map<int, State> states_;
};

}  // namespace horo
