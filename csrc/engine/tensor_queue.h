// Tensors a caller has handed over and the background thread has not yet
// finished, keyed by name. Enqueue never blocks on the network: it records
// the tensor, wakes the background thread and returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/element_pool.h"
#include "common/node_pool.h"
#include "engine/buffer_pool.h"
#include "gpu/cuda_event.h"
#include "gpu/device_memory.h"
#include "wire/messages.h"

namespace horo {

// An output only the agreed response can size (allgather, alltoall): the
// core allocates it and hands it to the caller with its shape.
struct AllocatedOutput {
  // From the buffer pool, uninitialised: the collective overwrites every
  // byte, and zeroing 64 MiB first would cost as much as moving it.
  class Bytes {
   public:
    // `shared`: memory from the transport (ShmCapabilities::output_allocator), else the pool's.
    void resize(size_t n, std::shared_ptr<char> shared = nullptr) {
      data_ = shared ? std::move(shared) : BufferPool::instance().acquire(n);
      size_ = n;
    }
    char* data() { return data_.get(); }
    size_t size() const { return size_; }

   private:
    std::shared_ptr<char> data_;
    size_t size_ = 0;
  };
  Bytes bytes;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;  // alltoall
  int64_t value = -1;  // add_process_set: the new set's id; join: the last rank to join
  // GPU tensors: the output the core allocated on the device (instead of `bytes`),
  // and the event after which the results are ready on horo's stream.
  std::shared_ptr<DeviceMemory> device_bytes;
  CudaEventPtr done;
};

struct TensorEntry {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;  // null: the core allocates `allocated`
  std::shared_ptr<AllocatedOutput> allocated;
  int handle = 0;
  // request.memory == kCuda: the CUDA device of input/output, and an event
  // recorded on the producer's stream at enqueue (horo reads after it).
  int device = -1;
  CudaEventPtr ready;
  // Set only while a timeline records (its QUEUE phase starts here).
  std::chrono::steady_clock::time_point enqueued_at{};
};

// Empties `entry` for another tensor, keeping its name's, shape's and splits'
// buffers: a caller describing tensor after tensor in one entry (see
// TensorQueue::push) then allocates nothing for them.
void reset_for_reuse(TensorEntry& entry);

class TensorQueue {
 public:
  // Throws horo::Error when the name is still taken on this rank: from
  // submission until its collective completes (release(), called before the
  // handle reads as done), whether or not the caller synchronized it, as in Horovod.
  // `notify`: wake the background thread (off where the pushing caller runs the cycle itself).
  // The entry is swapped in: `entry` comes back holding a finished entry's buffers, to reuse.
  void push(TensorEntry& entry, bool notify = true);
  void release(int handle);
  // A tensor this rank refused at submission (request.rejection says why):
  // it travels to the coordinator like a request but holds no buffer.
  void push_rejection(Request request);
  // Requests pushed since the last call, in push order, and their entries'
  // enqueued_at in the same order (both vectors are replaced; the requests
  // they held are kept for later pushes, so hand back the same vectors each time).
  void take_new_requests(std::vector<Request>* requests, std::vector<std::chrono::steady_clock::time_point>* enqueued_at);
  // Removes and returns the in-flight entry; false if there is none. The entry
  // is swapped out: what `entry` held is kept, buffers and all, for a later push.
  bool take(int process_set, const std::string& name, TensorEntry* entry);
  // Likewise, for the entry pushed with `handle` (its name stays taken until release()).
  bool take(int handle, TensorEntry* entry);
  // The in-flight entry's input buffer, which stays in flight (nullptr: none).
  const void* input_of(int process_set, const std::string& name);
  std::vector<TensorEntry> take_all();
  std::vector<TensorEntry> take_all_of(int process_set);
  // Sleeps until something is pushed, wake() is called, or `timeout` passes;
  // `spin`: first spins (yielding) for up to set_spin()'s time.
  void wait_for_work(std::chrono::microseconds timeout, bool spin = true);
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }
  void wake();
  // For waits on something other than this queue (a transport's doorbell):
  // whether wait_for_work() would return now, and forgetting a wake().
  bool has_work();
  void clear_woken();
  // Called after every push() and wake(), outside the queue's lock; setting
  // nullptr waits for a call in progress to finish.
  void set_on_work(std::function<void()> fn);

 private:
  std::mutex mutex_;
  std::condition_variable work_cv_;
  bool woken_ = false;
  std::chrono::microseconds spin_{0};
  // Names are unique per process set: the key is (set, name).
  std::unordered_map<std::string, TensorEntry> in_flight_;
  std::unordered_map<std::string, int> taken_;  // key -> handle
  std::unordered_map<int, std::string> key_of_handle_;
  NodePool<std::unordered_map<std::string, TensorEntry>> entry_nodes_;
  NodePool<std::unordered_map<std::string, int>> taken_nodes_;
  NodePool<std::unordered_map<int, std::string>> key_nodes_;
  std::string key_;  // key_of()'s result, reused so a long name costs no allocation per call
  const std::string& key_of(int process_set, const std::string& name);
  std::vector<Request> new_requests_;
  ElementPool<Request> request_pool_;
  std::vector<std::chrono::steady_clock::time_point> new_enqueued_at_;
  std::mutex on_work_mutex_;
  std::function<void()> on_work_;
  void notify_on_work();
};

}  // namespace horo
