#include "engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/logging.h"
#include "engine/fusion_buffer.h"
#include "reduce/reduce_kernels.h"
#include "transport/shm/futex_wait.h"

namespace horo {

namespace {
// How long an idle loop that is woken by any peer's activity sleeps at most.
constexpr std::chrono::microseconds kIdleWakeup{1000000};
// How long the loop leaves a new tensor to a caller that may run its cycle
// itself (Engine::help) before running it: far below any step's compute.
constexpr std::chrono::microseconds kCallerGrace{100};
constexpr std::chrono::microseconds kHelperLockWait{1000};
// How often the loop tests point-to-point transfers in flight that nobody waits for.
constexpr std::chrono::microseconds kPointToPointPoll{1000};
// A timeline stopped while a collective runs longer than this closes without that collective's events.
constexpr std::chrono::seconds kTimelineFlushWait{10};
bool refused_here(const Response& error, int set_rank) {
  return std::find(error.per_rank.begin(), error.per_rank.end(), set_rank) != error.per_rank.end();
}
}  // namespace

Engine::Engine(std::unique_ptr<Transport> transport, const Tunables& tunables) : tunables_(tunables) {
  if (tunables_.fusion_max_tensor_bytes < 0) {  // auto
    // Through shared memory a collective of its own costs a few microseconds, less than the
    // copies into and out of the fusion buffer from 64 KiB (MEASUREMENTS.md, "Fusion on shared memory").
    tunables_.fusion_max_host_tensor_bytes = transport->shm() ? 65536 : 1048576;
    tunables_.fusion_max_tensor_bytes = 1048576;
  }
  queue_.set_spin(std::chrono::microseconds(tunables_.spin_microseconds));
  handles_.set_spin(std::chrono::microseconds(tunables_.spin_microseconds));
  // A name is free again once its collective completed, synchronized or not (Horovod's rule).
  handles_.set_before_done([this](int handle) { queue_.release(handle); });
  rank_ = transport->rank();
  timeline_.set_topology(tunables_.topology);
  if (!tunables_.timeline_path.empty() && rank_ == 0) {
    try {
      timeline_.start(tunables_.timeline_path, tunables_.timeline_mark_cycles);
    } catch (const Error& e) {
      // Other ranks are starting already: refusing to start here would hang them.
      HORO_LOG(kLogError, "HORO_TIMELINE: " << e.what() << "; running without a timeline");
    }
  }
  std::vector<int> everyone(transport->size());
  for (int r = 0; r < transport->size(); ++r) everyone[r] = r;
  add_set(0, std::move(transport), std::move(everyone));
  Transport* global = sets_.at(0).transport.get();
  ShmCapabilities* shm = global->shm();
  if (shm) {
    shared_output_ = shm->output_allocator();
    queue_.set_on_work([shm] { shm->wake_local(); });
  }
  // Where the global set watches its peers, or this rank has none (a job of one),
  // the background thread needs no polling period, and a waiting caller may run
  // its own cycle.
  callers_may_run_ = (shm && shm->watches_peers()) || global->size() == 1;
  thread_ = std::thread([this] { loop(); });
  pthread_setname_np(thread_.native_handle(), "horo-engine");  // in top -H, gdb and /proc/*/task/*/comm
}

void Engine::add_set(int id, std::unique_ptr<Transport> transport, std::vector<int> members) {
  ProcessSet& set = sets_[id];
  set.members = std::move(members);
  set.transport = std::move(transport);
  set.controller = std::make_unique<Controller>(*set.transport, tunables_, set.members);
  set.executor = std::make_unique<Executor>(*set.transport, tunables_, timeline_);
  p2p_.add_set(id, set.transport.get(), set.members);
}

int Engine::point_to_point(int set_id, const std::vector<PointToPoint::Op>& ops, const std::string& name) {
  if (stopped_) throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  return p2p_.start(set_id, ops, name);
}

Engine::~Engine() { shutdown(); }

int Engine::enqueue(TensorEntry&& entry, HandleTable::Callback on_complete, bool caller_waits) {
  if (stopped_) throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  // GPU work stays on the background thread (device guards would make any thread
  // work, but that path has not run on a GPU yet): no caller runs cycles from here on.
  if (entry.request.memory == Memory::kCuda) callers_may_run_ = false;
  if (on_complete) {
    callback_work_ = true;
    entry.handle = handles_.create(std::move(on_complete));
  } else {
    entry.handle = handles_.create();
  }
  if (timeline_.recording()) entry.enqueued_at = Timeline::Clock::now();
  const int handle = entry.handle;
  try {
    queue_.push(entry, !(caller_waits && callers_may_run_ && !on_complete));
  } catch (const Error&) {
    // A name still in flight on this rank: the call never happened, here or at the
    // coordinator, and the tensor already in flight under that name goes on.
    handles_.forget(handle);
    throw;
  }
  // The loop may have stopped between the check and the push; if it has not
  // failed this entry itself, take it back so the caller hears it now.
  TensorEntry stranded;
  if (stopped_ && queue_.take(handle, &stranded)) {
    handles_.forget(handle);
    queue_.release(handle);  // frees the name
    throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  }
  return handle;
}

void Engine::reject(Request request, const std::string& why) {
  if (stopped_) return;  // nobody is waiting for a negotiation any more
  request.rejection = why.empty() ? "refused" : why;
  queue_.push_rejection(std::move(request));
}

void Engine::reject(CollectiveType type, std::string name, int process_set, const std::string& why) {
  Request request;
  request.type = type;
  request.name = std::move(name);
  request.process_set = process_set;
  reject(std::move(request), why);
}

void Engine::shutdown() {
  shutdown_requested_ = true;
  queue_.wake();
  if (thread_.joinable()) thread_.join();
  timeline_.stop();
}

void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  if (rank_ != 0) return;
  if (stopped_) throw Error("horo has been shut down" + stop_reason_ + "; call horo.init() again first");
  flush_timeline();  // into the file being replaced
  timeline_.start(path, mark_cycles);
}

void Engine::stop_timeline() {
  if (rank_ != 0) return;
  flush_timeline();
  timeline_.stop();
}

void Engine::flush_timeline() {
  // Cycles record under the cycle lock: between two of them, what they recorded
  // (say, the rest of a collective whose handle the caller holds) is flushed here,
  // where an idle background thread would run no pass that flushes it.
  std::unique_lock<std::timed_mutex> lock(cycle_mutex_, std::defer_lock);
  if (lock.try_lock_for(kTimelineFlushWait)) timeline_.flush();
}

bool Engine::any_pending() const {
  for (auto& kv : sets_) {
    if (kv.second.controller->has_pending()) return true;
  }
  return false;
}

void Engine::loop() {
  using namespace std::chrono;
  const auto cycle_time = duration_cast<microseconds>(duration<double, std::milli>(tunables_.cycle_time_ms));
  auto backoff = microseconds(0);  // grows while pending tensors make no progress
  // Set 0 lives until the loop ends; its transport is safe to wait on without the lock.
  Transport* global = sets_.at(0).transport.get();
  ShmCapabilities* shm = global->shm();
  // Alone (a job of one rank), nothing comes from peers: the idle loop needs no polling period.
  const auto idle_wait = global->size() == 1 ? kIdleWakeup : cycle_time;
  try {
    for (;;) {
      bool pending;
      {
        std::lock_guard<std::timed_mutex> lock(cycle_mutex_);
        if (helper_failure_) std::rethrow_exception(helper_failure_);
        if (stop_) break;
        pending = any_pending();
      }
      // Where the global set's transport sees its peers (shared memory), the
      // loop sleeps until this rank or a peer has work: no polling period when
      // idle, and a peer that starts a cycle ends a backoff at once.
      auto local_work = [this] { return queue_.has_work() || shutdown_requested_; };
      // Transfers nobody waits for (a future's, a receive's answer) still progress.
      const bool p2p_alone = p2p_.in_flight() && !p2p_.driven();
      if (p2p_alone) p2p_.progress(-1, true);
      const auto poll_cap = p2p_alone ? kPointToPointPoll : kIdleWakeup;
      const auto timeout = std::min(poll_cap, !pending ? kIdleWakeup : backoff);
      if (shutdown_requested_ || (pending && backoff.count() == 0)) {
        if (!pending) queue_.wait_for_work(microseconds(0));
      } else if (shm && shm->wait_for_peers(local_work, timeout, !callers_may_run_)) {
        queue_.clear_woken();
        // A caller about to wait for its tensor, or for the tensor a peer's
        // cycle is about, runs that cycle itself (help()), with its tensor in
        // it; joining at once would only run a cycle without it.
        // Not for tensors with a completion callback (TF's ops): nobody waits to run those.
        const bool callback_work = callback_work_.exchange(false);
        if (callers_may_run_ && !shutdown_requested_ && !callback_work) std::this_thread::sleep_for(kCallerGrace);
      } else {
        // Where callers run their cycles, a spin here would only take their tensors from them.
        queue_.wait_for_work(std::min<microseconds>(poll_cap, pending ? backoff : idle_wait), !callers_may_run_);
      }
      bool progressed;
      {
        std::lock_guard<std::timed_mutex> lock(cycle_mutex_);
        if (helper_failure_) std::rethrow_exception(helper_failure_);
        if (stop_) break;
        // A caller waiting for its tensor may have run the cycle this wake-up was for.
        if (shm && shm->watches_peers() && !shutdown_requested_ && !queue_.has_work() && !any_pending() &&
            !shm->peers_ahead()) {
          continue;
        }
        progressed = run_pass();
      }
      // Waiting on peers costs a polite poll inside the cycle; back-to-back
      // cycles only spin when every rank waits on the others' callers, so
      // back off then (bounded by the cycle time).
      backoff = progressed ? microseconds(0) : std::min(cycle_time, std::max(microseconds(20), backoff * 2));
    }
    stop_reason_ = "";
    fail_everything("horo was shut down (by this or another rank) while this tensor was pending");
  } catch (const PeerUnreachable& e) {
    HORO_LOG(kLogError, "background thread stopped: " << e.what());
    stop_reason_ = std::string(" after peers became unreachable: ") + e.what();
    fail_everything(std::string("horo's background thread failed: ") + e.what());
    // Freeing communicators (shared-memory segments end with a barrier) would wait on
    // peers that are gone; the process ends with MPI_Abort (peer_watch.h), so keep them.
    std::lock_guard<std::timed_mutex> lock(cycle_mutex_);  // no caller is in a cycle on them
    stop_ = true;
    new std::map<int, ProcessSet>(std::move(sets_));
  } catch (const std::exception& e) {
    HORO_LOG(kLogError, "background thread stopped: " << e.what());
    stop_reason_ = std::string(" after an internal error: ") + e.what();
    fail_everything(std::string("horo's background thread failed: ") + e.what());
  }
  std::lock_guard<std::timed_mutex> lock(cycle_mutex_);
  stop_ = true;  // no caller runs a cycle from here on
  timeline_.flush();
  queue_.set_on_work(nullptr);  // before the transport it calls goes
  // Frees the communicators, sub-sets first; every rank leaves the loop in the same cycle.
  while (!sets_.empty()) sets_.erase(std::prev(sets_.end()));
}

bool Engine::run_pass() {
  const int64_t cycle_start = timeline_.activity_start();
  // Route new requests to their set; a set this rank is not in fails at once.
  // (Members reused pass after pass: a small collective's cycle allocates nothing here.)
  for (auto& kv : arrived_) arrived_pool_.clear(kv.second);
  queue_.take_new_requests(&requests_, &enqueued_at_);
  for (size_t i = 0; i < requests_.size(); ++i) {
    Request& q = requests_[i];
    if (sets_.count(q.process_set)) {
      timeline_.negotiation_started(q.process_set, q, enqueued_at_[i], cycle_start);
      arrived_pool_.append(arrived_[q.process_set]) = q;  // q stays whole: the queue reuses it
      continue;
    }
    TensorEntry e;
    if (queue_.take(q.process_set, q.name, &e)) {
      fail({std::move(e)}, "process set " + std::to_string(q.process_set) + " does not exist on this rank");
    }
  }
  bool progressed = false;
  size_t responses = 0;
  // Ids ascend on every rank, so members of a set reach its cycle in the same order.
  set_ids_.clear();
  for (auto& kv : sets_) set_ids_.push_back(kv.first);
  for (int id : set_ids_) {
    if (!sets_.count(id)) continue;  // removed earlier in this pass
    const bool global = id == 0;
    auto input_of = [this](const Request& q) { return queue_.input_of(q.process_set, q.name); };
    const Controller::Cycle& cycle =
        sets_[id].controller->run_cycle(arrived_[id], global && shutdown_requested_, input_of);
    progressed |= !cycle.responses.empty();
    responses += cycle.responses.size();
    timeline_.cycle_finished(id, cycle.responses);
    const bool shutdown = cycle.shutdown;
    execute(id, cycle.responses);  // may remove sets: `cycle` is read before
    stop_ |= global && shutdown;
  }
  if (progressed) timeline_.mark_cycle(cycle_start, static_cast<int64_t>(responses));
  timeline_.flush();
  return progressed;
}

void Engine::help(int handle) {
  // Where callers may not run cycles, the enqueue woke the background thread (a
  // CUDA tensor that turns them off is pushed with a wake, which takes every
  // request). Otherwise whoever returns without running the cycle hands it to the
  // background thread, which a blocking caller's enqueue did not wake.
  if (!callers_may_run_ || (p2p_.in_flight() && p2p_.owns(handle))) return;  // point-to-point needs no cycle
  if (shutdown_requested_) return queue_.wake();
  // The background thread may be in a cycle (one a peer began, before this caller
  // came): wait for it a little rather than hand over, since it ends within microseconds
  // unless a large collective runs, and then a waiter gains nothing. (A free lock is taken
  // without the timed wait, which reads the clock first.)
  std::unique_lock<std::timed_mutex> lock(cycle_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) lock.try_lock_for(kHelperLockWait);
  if (!lock.owns_lock() || stop_ || helper_failure_ || handles_.poll(handle, true)) return queue_.wake();
  ShmCapabilities* shm = sets_.at(0).transport->shm();
  auto done = [&] { return handles_.poll(handle, true) || stop_ || shutdown_requested_; };
  auto news = [&] { return done() || queue_.has_work() || (shm && shm->peers_ahead()); };
  if (shm) shm->set_caller_cycles(true);
  try {
    // Our tensor is new: start a cycle now. Then join the cycles peers start
    // (their callers' tensors) until ours has run or they go quiet.
    do {
      run_pass();
    } while (!done() && spin_for(news, std::chrono::microseconds(tunables_.spin_microseconds), tunables_.spin_yields) &&
             !done());
  } catch (...) {
    // The background thread ends the engine the way it would have had it run this cycle.
    helper_failure_ = std::current_exception();
  }
  if (shm) shm->set_caller_cycles(false);
  // A peer that has begun its next cycle is not a reason to wake the background
  // thread (that wake-up took the core this rank's caller runs on): the cycle
  // cannot finish before this rank's next tensor, which this caller brings or
  // whose enqueue wakes the thread; a cycle about nothing of this rank's (a
  // shutdown) is found by the idle wait, which looks at its peers every 100 ms.
  const bool more = stop_ || helper_failure_ || queue_.has_work() || any_pending();
  lock.unlock();
  if (more) queue_.wake();  // the background thread takes over
}

void Engine::fail(std::vector<TensorEntry> entries, const std::string& why) {
  for (TensorEntry& e : entries) {
    handles_.complete(e.handle, std::string(collective_name(e.request.type)) + " '" + e.request.name + "': " + why);
  }
}

void Engine::fail_everything(const std::string& why) {
  stopped_ = true;
  fail(queue_.take_all(), why);
  p2p_.fail_all(why);
}

std::shared_ptr<AllocatedOutput> Engine::change_sets(const Request& agreed) {
  auto out = std::make_shared<AllocatedOutput>();
  if (agreed.type == CollectiveType::kAddProcessSet) {
    // Every rank runs this in the same global order, so ids agree everywhere.
    const int id = next_set_id_++;
    std::vector<int> members(agreed.splits.begin(), agreed.splits.end());
    std::unique_ptr<Transport> sub = sets_.at(0).transport->split(members);
    if (sub) add_set(id, std::move(sub), members);
    out->value = id;
  } else {
    const int id = agreed.root;
    fail(queue_.take_all_of(id), "process set " + std::to_string(id) + " was removed while this tensor was pending");
    p2p_.remove_set(id, "process set " + std::to_string(id) + " was removed while this transfer was pending");
    sets_.erase(id);  // members free its communicator together
    out->value = id;
  }
  return out;
}

void Engine::execute(int set_id, const std::vector<Response>& responses) {
  if (responses.empty()) return;
  ProcessSet& set = sets_.at(set_id);
  plan_fusion(responses, static_cast<size_t>(tunables_.fusion_threshold_bytes),
              static_cast<size_t>(tunables_.fusion_max_host_tensor_bytes),
              static_cast<size_t>(tunables_.fusion_max_tensor_bytes), &groups_);
  for (const std::vector<Response>& group : groups_) {
    std::vector<TensorEntry>& entries = entries_;  // kept, entries and all: take() swaps them into the queue
    entry_pool_.clear(entries);
    std::vector<std::vector<char>> stand_ins;  // a joined rank's identity contributions
    for (const Response& r : group) {
      if (r.kind == Response::Kind::kError && refused_here(r, set.transport->rank())) {
        continue;  // this rank refused it at submission: a namesake in flight now is a later tensor
      }
      TensorEntry& e = entry_pool_.append(entries);
      if (queue_.take(set_id, r.request.name, &e)) continue;
      if (r.kind == Response::Kind::kExecute && r.request.type == CollectiveType::kAllreduce &&
          set.controller->joined()) {
        reset_for_reuse(e);
        e.request = r.request;
        const size_t count = static_cast<size_t>(r.request.num_elements());
        stand_ins.emplace_back(count * dtype_size(r.request.dtype));
        fill_identity(r.request.dtype, r.request.op, stand_ins.back().data(), count);
        e.input = e.output = stand_ins.back().data();
        continue;
      }
      entry_pool_.truncate(entries, entries.size() - 1);
      if (r.kind == Response::Kind::kExecute) {
        // Cannot happen while ranks agree; refusing beats joining a collective without a buffer.
        throw Error("response for '" + r.request.name + "' has no local tensor");
      }
    }
    const Request& agreed = group.front().request;
    timeline_.group_started(set_id, group);
    if (group.front().kind == Response::Kind::kError) {
      timeline_.group_finished(true);
      for (auto& e : entries) {
        handles_.complete(e.handle, group.front().error);
        e.ready = nullptr;
      }
      continue;
    }
    std::string error;
    try {
      if (agreed.type == CollectiveType::kAddProcessSet || agreed.type == CollectiveType::kRemoveProcessSet) {
        entries.front().allocated = change_sets(agreed);
      } else if (agreed.type == CollectiveType::kJoin) {
        entries.front().allocated = std::make_shared<AllocatedOutput>();
        entries.front().allocated->value = group.front().per_rank.front();
      } else {
        // Callers name roots by global rank; the set's transport counts from 0.
        for (auto& e : entries) {
          auto at = std::find(set.members.begin(), set.members.end(), e.request.root);
          if (at != set.members.end()) e.request.root = static_cast<int32_t>(at - set.members.begin());
        }
        // The one place GPU tensors part ways: their executor picks NCCL or MPI staging.
        if (agreed.memory == Memory::kCuda) {
          if (!set.gpu) set.gpu = std::make_unique<GpuExecutor>(*set.transport, *set.executor, tunables_, timeline_);
          set.gpu->run(group, entries);
        } else {
          set.executor->run(group, entries);
        }
      }
    } catch (const PeerUnreachable& e) {
      // These callers hear why; the loop stops, since MPI cannot go on past a lost peer.
      for (auto& entry : entries) {
        handles_.complete(entry.handle, std::string(collective_name(agreed.type)) + " '" + entry.request.name +
                                            "' failed: " + e.what());
      }
      throw;
    } catch (const Error& e) {
      error = std::string(collective_name(agreed.type)) + " '" + agreed.name + "' failed: " + e.what();
    }
    timeline_.group_finished(!error.empty());
    for (auto& e : entries) {
      handles_.complete(e.handle, error, std::move(e.allocated));
      e.ready = nullptr;  // a CUDA event goes with its last reference; the entry is kept for its buffers
    }
  }
}

}  // namespace horo
