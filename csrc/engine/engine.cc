#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/logging.h"
#include "engine/fusion_buffer.h"

namespace horo {

Engine::Engine(std::unique_ptr<Transport> transport, const Tunables& tunables)
    : tunables_(tunables),
      transport_(std::move(transport)),
      controller_(*transport_, tunables_),
      executor_(*transport_, tunables_) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

int Engine::enqueue(TensorEntry entry) {
  if (stopped_) throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  const std::string name = entry.request.name;
  entry.handle = handles_.create();
  const int handle = entry.handle;
  try {
    queue_.push(std::move(entry));
  } catch (const Error&) {
    handles_.complete(handle, "rejected");
    handles_.wait(handle);  // forgets the handle
    throw;
  }
  // The loop may have stopped between the check and the push; if it has not
  // failed this entry itself, take it back so the caller hears it now.
  TensorEntry stranded;
  if (stopped_ && queue_.take(name, &stranded)) {
    handles_.complete(handle, "shut down");
    handles_.wait(handle);  // forgets the handle
    throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  }
  return handle;
}

void Engine::shutdown() {
  shutdown_requested_ = true;
  queue_.wake();
  if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
  using namespace std::chrono;
  const auto cycle_time = duration_cast<microseconds>(duration<double, std::milli>(tunables_.cycle_time_ms));
  auto backoff = microseconds(0);  // grows while pending tensors make no progress
  try {
    while (true) {
      if (!controller_.has_pending()) {
        queue_.wait_for_work(shutdown_requested_ ? microseconds(0) : cycle_time);
      } else if (backoff.count() > 0) {
        queue_.wait_for_work(backoff);
      }
      Controller::Cycle cycle = controller_.run_cycle(queue_.take_new_requests(), shutdown_requested_);
      const bool progressed = !cycle.responses.empty();
      execute(std::move(cycle.responses));
      if (cycle.shutdown) break;
      // Waiting on peers costs a polite poll inside the cycle; back-to-back
      // cycles only spin when every rank waits on the others' callers, so
      // back off then (bounded by the cycle time).
      backoff = progressed ? microseconds(0) : std::min(cycle_time, std::max(microseconds(20), backoff * 2));
    }
    stop_reason_ = "";
    fail_everything("horo was shut down (by this or another rank) while this tensor was pending");
  } catch (const std::exception& e) {
    HORO_LOG(kLogError, "background thread stopped: " << e.what());
    stop_reason_ = std::string(" after an internal error: ") + e.what();
    fail_everything(std::string("horo's background thread failed: ") + e.what());
  }
  transport_.reset();  // frees the communicator; every rank leaves the loop in the same cycle
}

void Engine::fail_everything(const std::string& why) {
  stopped_ = true;
  for (TensorEntry& e : queue_.take_all()) {
    handles_.complete(e.handle, std::string(collective_name(e.request.type)) + " '" + e.request.name + "': " + why);
  }
}

void Engine::execute(std::vector<Response> responses) {
  if (responses.empty()) return;
  for (auto& group : plan_fusion(std::move(responses), static_cast<size_t>(tunables_.fusion_threshold_bytes))) {
    std::vector<TensorEntry> entries;
    for (const Response& r : group) {
      TensorEntry e;
      if (queue_.take(r.request.name, &e)) {
        entries.push_back(std::move(e));
      } else if (r.kind == Response::Kind::kExecute) {
        // Cannot happen while ranks agree; refusing beats joining a collective without a buffer.
        throw Error("response for '" + r.request.name + "' has no local tensor");
      }
    }
    if (group.front().kind == Response::Kind::kError) {
      for (auto& e : entries) handles_.complete(e.handle, group.front().error);
      continue;
    }
    std::string error;
    try {
      executor_.run(group, entries);
    } catch (const Error& e) {
      error = std::string(collective_name(group.front().request.type)) + " '" + group.front().request.name +
              "' failed: " + e.what();
    }
    for (auto& e : entries) handles_.complete(e.handle, error, std::move(e.allocated));
  }
}

}  // namespace horo
