// The timeline: a Chrome trace (JSON array format; opens in Perfetto and
// chrome://tracing) of every tensor's phases on this rank, one trace
// "process" (row) per tensor name, as Horovod's timeline:
//
//   QUEUE                    enqueue -> the background thread picks it up
//   NEGOTIATE_<COLLECTIVE>   the first coordination cycle it takes part in
//   WAIT_FOR_OTHER_RANKS     later cycles, until every rank has submitted it
//   <COLLECTIVE>             execution (args.tensors: how many were fused), with
//                            nested activities: MEMCPY_IN_FUSION_BUFFER,
//                            the algorithm (RING_ALLREDUCE, MPI_ALLREDUCE,
//                            MPI_BCAST, ...), MEMCPY_OUT_FUSION_BUFFER
//
// and, with mark_cycles, an instant CYCLE_START on row 0 for every cycle that
// ran something (idle cycles, 1000 a second, are left out to keep files small).
//
// Why it costs nothing measurable: the background thread appends fixed-size
// events to a vector only it touches (no I/O, no lock); once per cycle, if it
// recorded anything, it hands the vector over under one short lock; a writer
// thread formats and writes. Spans are written as complete ("X") events when
// they end, so the label can name what actually ran.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "wire/messages.h"

namespace horo {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;
  ~Timeline() { stop(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Caller threads. start() replaces a running timeline; throws Error when
  // the file cannot be opened. What cycles recorded and did not flush yet is
  // lost: the engine flushes between cycles first (Engine::flush_timeline).
  void start(const std::string& path, bool mark_cycles);
  // Where this job runs (ranks, hosts, transport): a label on row 0 of every
  // trace. Set once, before the first start().
  void set_topology(std::string topology) { topology_ = std::move(topology); }
  void stop();
  // Cheap enough for the enqueue path: one relaxed load.
  bool recording() const { return active_.load(std::memory_order_relaxed); }

  // ---- the background thread only ----
  bool active();  // also notices a new session
  // A new request reached the background thread at `now` (activity_start() of the cycle).
  void negotiation_started(int set_id, const Request& request, Clock::time_point enqueued_at, int64_t now);
  // After the set's cycle: `responses` are agreed; the rest wait for other ranks.
  void cycle_finished(int set_id, const std::vector<Response>& responses);
  // Brackets one fusion group's execution; activities in between apply to it.
  void group_started(int set_id, const std::vector<Response>& group);
  void group_finished(bool failed);
  // Start time for activity(); -1 when not recording.
  int64_t activity_start() { return active() ? now_us() : -1; }
  void activity(const char* label, int64_t start_us);
  void mark_cycle(int64_t start_us, int64_t responses);
  // Hands recorded events to the writer (after every pass; by whoever holds the
  // engine's cycle lock, which every recording happens under).
  void flush();

 private:
  struct Event {
    int64_t ts;
    int64_t dur;  // X events
    int32_t row;
    char phase;  // 'X' complete, 'i' instant
    const char* label;
    int64_t arg;  // args.tensors / args.responses; -1: none
  };
  enum class State : uint8_t { kIdle, kFirstCycle, kWaiting };
  struct Row {
    int id;
    State state = State::kIdle;
    int set_id = 0;
    CollectiveType type = CollectiveType::kAllreduce;
    int64_t since = 0;  // start of the open phase
  };

  int64_t now_us() const { return to_us(Clock::now()); }
  int64_t to_us(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
  }
  Row* find_row(int set_id, const std::string& name);
  Row& row(int set_id, const std::string& name);
  void span(const Row& r, const char* label, int64_t start, int64_t end, int64_t arg = -1) {
    local_.push_back(Event{start, end - start, r.id, 'X', label, arg});
  }
  void close();  // control_ held
  void write_loop();
  void write_batch(std::vector<Event>& events, std::vector<std::pair<int, std::string>>& rows);

  // Shared state (mutex_).
  std::mutex control_;  // serialises start/stop
  std::mutex mutex_;
  std::condition_variable writer_cv_;
  std::vector<Event> pending_;
  std::vector<std::pair<int, std::string>> pending_rows_;
  bool closing_ = false;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> session_{0};
  Clock::time_point origin_;
  bool mark_cycles_ = false;
  std::string topology_;

  // Writer thread.
  std::thread writer_;
  std::FILE* file_ = nullptr;
  bool first_event_ = true;

  // Background thread.
  uint64_t seen_session_ = 0;
  std::vector<Event> local_;
  std::vector<std::pair<int, std::string>> new_rows_;
  std::unordered_map<std::string, Row> rows_;
  std::vector<Row*> first_cycle_;   // rows in their first cycle
  std::vector<Row*> group_;         // the fusion group being executed
  const char* group_label_ = nullptr;
  int64_t group_start_ = 0;
};

}  // namespace horo
