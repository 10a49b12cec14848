// One per process: the tensor queue, the handle table and the background
// thread that runs coordination cycles and executes what they agree on.
// All network traffic happens on that thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/tunables.h"
#include "engine/executor.h"
#include "engine/controller.h"
#include "engine/handle_table.h"
#include "engine/tensor_queue.h"
#include "transport/transport.h"

namespace horo {

class Engine {
 public:
  Engine(std::unique_ptr<Transport> transport, const Tunables& tunables);
  ~Engine();

  // Hands a tensor to the background thread; returns its handle at once.
  int enqueue(TensorEntry entry);
  bool poll(int handle) { return handles_.poll(handle); }
  // Blocks until the handle completes.
  HandleTable::Result wait(int handle) { return handles_.wait(handle); }
  // Collective in effect: the first rank to ask stops every rank's loop.
  void shutdown();
  bool stopped() const { return stopped_; }

 private:
  void loop();
  void execute(std::vector<Response> responses);
  void fail_everything(const std::string& why);

  Tunables tunables_;
  std::unique_ptr<Transport> transport_;
  TensorQueue queue_;
  HandleTable handles_;
  Controller controller_;
  Executor executor_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> stopped_{false};
  std::string stop_reason_;
  std::thread thread_;
};

}  // namespace horo
