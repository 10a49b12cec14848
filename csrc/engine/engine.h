// One per process: the tensor queue, the handle table and the background
// thread that runs coordination cycles and executes what they agree on.
// Network traffic happens on that thread, or, where handing over costs more
// than the collective (shared memory, see help()), on a caller waiting for
// its own tensor; a mutex keeps cycles one at a time. Each process set this rank
// belongs to (0 is every rank) has its own transport, controller and
// executor; one loop cycles them in id order, so members of a set always
// meet in that set's cycles and sets never wait on each other's tensors.
#pragma once

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/element_pool.h"
#include "common/tunables.h"
#include "engine/executor.h"
#include "engine/controller.h"
#include "engine/handle_table.h"
#include "engine/point_to_point.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"
#include "gpu/gpu_executor.h"
#include "transport/transport.h"

namespace horo {

class Engine {
 public:
  Engine(std::unique_ptr<Transport> transport, const Tunables& tunables);
  ~Engine();

  // Hands a tensor to the background thread; returns its handle at once.
  // With `on_complete`, the completing thread calls it instead of a wait_for(),
  // and the tensor's name is free again once it has run.
  // `caller_waits`: the caller waits for the handle right away (a blocking
  // collective), so where callers run cycles (help()) the background thread is
  // not woken for it: on a host with a rank per core, that wake-up takes the
  // core a rank's caller runs on. The entry is swapped into the queue: it comes
  // back holding a finished entry's buffers, which a caller may reuse (reset_for_reuse()).
  int enqueue(TensorEntry&& entry, HandleTable::Callback on_complete = nullptr, bool caller_waits = false);
  // Tells the other ranks this rank refused a tensor at submission (bad
  // argument, duplicate name), so their namesakes fail instead of waiting.
  void reject(Request request, const std::string& why);
  // The same for a tensor known only by its collective, name and process set (the bindings and the C API).
  void reject(CollectiveType type, std::string name, int process_set, const std::string& why);
  // Users' point-to-point (PointToPoint::start): posted now, on this thread, in process set
  // `set_id`; the handle is waited for and polled like a collective's.
  int point_to_point(int set_id, const std::vector<PointToPoint::Op>& ops, const std::string& name);
  bool poll(int handle, bool forgotten_is_done = false) {
    p2p_.progress();
    return handles_.poll(handle, forgotten_is_done);
  }
  // Waits up to `timeout` for the handle; true (and `result` set) once it completed.
  // (The tensor's name was freed for reuse when the collective completed, as in Horovod.)
  bool wait_for(int handle, std::chrono::milliseconds timeout, HandleTable::Result* result) {
    if (p2p_.in_flight() && p2p_.owns(handle)) {
      p2p_.drive(handle, timeout);  // nobody else may be testing its transfers
      return handles_.wait_for(handle, std::chrono::milliseconds(0), result);
    }
    return handles_.wait_for(handle, timeout, result);
  }
  // Runs coordination cycles on the calling thread until `handle` completes
  // or the peers stop answering within the spin time, where the transport
  // lets a caller do so (shared memory, CPU tensors only): a small collective
  // then costs no hand-over to the background thread and back. Returns when
  // another thread runs a cycle for longer than a millisecond; the background
  // thread then takes over. Call without the GIL.
  void help(int handle);
  // Collective in effect: the first rank to ask stops every rank's loop.
  void shutdown();
  bool stopped() const { return stopped_; }
  // Memory for a caller's new output array that the global set's peers can write into
  // (ShmCapabilities::output_allocator); null where there is none. Any thread, even after shutdown.
  std::shared_ptr<char> shared_output(size_t bytes) const { return shared_output_(bytes); }
  // Rank 0 records (as Horovod's coordinator does); elsewhere these do nothing.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();

 private:
  struct ProcessSet {
    std::vector<int> members;  // global ranks, in set-rank order
    std::unique_ptr<Transport> transport;
    std::unique_ptr<Controller> controller;
    std::unique_ptr<Executor> executor;
    std::unique_ptr<GpuExecutor> gpu;  // made on the set's first GPU tensor
  };
  void loop();
  void flush_timeline();  // rank 0, a caller thread
  // One cycle of every process set and the execution of what they agreed on.
  // Caller holds cycle_mutex_. True when anything ran.
  bool run_pass();
  bool any_pending() const;
  void add_set(int id, std::unique_ptr<Transport> transport, std::vector<int> members);
  void execute(int set_id, const std::vector<Response>& responses);
  // Process-set changes, agreed on the global set like any collective.
  std::shared_ptr<AllocatedOutput> change_sets(const Request& agreed);
  void fail(std::vector<TensorEntry> entries, const std::string& why);
  void fail_everything(const std::string& why);

  Tunables tunables_;
  int rank_ = 0;
  Timeline timeline_;  // outlives the executors that record into it
  TensorQueue queue_;
  HandleTable handles_;
  PointToPoint p2p_{handles_};
  // Cycle state: touched only under cycle_mutex_ (by the background thread or a helping caller).
  std::timed_mutex cycle_mutex_;
  std::map<int, ProcessSet> sets_;
  // run_pass()'s and execute()'s scratch, kept with what it held (ElementPool):
  // a pass of the common small collective allocates nothing.
  std::vector<Request> requests_;
  std::vector<Timeline::Clock::time_point> enqueued_at_;
  std::map<int, std::vector<Request>> arrived_;  // set id -> this pass's new requests
  ElementPool<Request> arrived_pool_;
  std::vector<int> set_ids_;
  std::vector<std::vector<Response>> groups_;  // plan_fusion()'s
  std::vector<TensorEntry> entries_;           // a group's
  ElementPool<TensorEntry> entry_pool_;
  bool stop_ = false;                   // a cycle agreed to shut down
  std::exception_ptr helper_failure_;   // a helping caller's cycle threw: the loop rethrows it
  // Callers may run cycles: the global transport watches its peers, and no GPU
  // tensor has been seen (their CUDA context belongs to the background thread).
  std::atomic<bool> callers_may_run_{false};
  std::atomic<bool> callback_work_{false};  // a tensor with a completion callback came since the last wake-up
  int next_set_id_ = 1;
  OutputAllocator shared_output_ = no_shared_outputs();  // the global set's, from construction
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> stopped_{false};
  std::string stop_reason_;
  std::thread thread_;
};

}  // namespace horo
