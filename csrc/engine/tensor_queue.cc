#include "engine/tensor_queue.h"

#include <algorithm>
#include <thread>

#include "common/error.h"

namespace horo {

void reset_for_reuse(TensorEntry& entry) {
  std::string name = std::move(entry.request.name);
  std::vector<int64_t> shape = std::move(entry.request.shape);
  std::vector<int64_t> splits = std::move(entry.request.splits);
  entry = TensorEntry{};
  entry.request.name = std::move(name);
  entry.request.name.clear();
  entry.request.shape = std::move(shape);
  entry.request.shape.clear();
  entry.request.splits = std::move(splits);
  entry.request.splits.clear();
}

void TensorQueue::push(TensorEntry& entry, bool notify) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string& name = entry.request.name;
    const std::string& key = key_of(entry.request.process_set, name);
    if (taken_.count(key)) {
      throw ArgumentError(std::string(collective_name(entry.request.type)) + " '" + name +
                          "': a tensor with this name is already in flight on this rank (its collective has not "
                          "completed); synchronize it first or give the new one another name");
    }
    taken_nodes_.insert(taken_, key, entry.handle);
    key_nodes_.insert(key_of_handle_, entry.handle, key);
    request_pool_.append(new_requests_) = entry.request;  // a kept request's buffers, reused
    new_enqueued_at_.push_back(entry.enqueued_at);
    entry_nodes_.insert_swapped(in_flight_, key, entry);
  }
  if (!notify) return;
  work_cv_.notify_one();
  notify_on_work();
}

void TensorQueue::push_rejection(Request request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request_pool_.append(new_requests_) = std::move(request);
    new_enqueued_at_.push_back(std::chrono::steady_clock::now());
  }
  work_cv_.notify_one();
}

void TensorQueue::release(int handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = key_of_handle_.find(handle);
  if (it == key_of_handle_.end()) return;
  taken_nodes_.erase(taken_, taken_.find(it->second));
  key_nodes_.erase(key_of_handle_, it);
}

void TensorQueue::take_new_requests(std::vector<Request>* requests,
                                    std::vector<std::chrono::steady_clock::time_point>* enqueued_at) {
  // Swapped, not moved: the queue keeps the caller's emptied vectors and their capacity,
  // and the requests they held.
  enqueued_at->clear();
  std::lock_guard<std::mutex> lock(mutex_);
  request_pool_.clear(*requests);
  requests->swap(new_requests_);
  enqueued_at->swap(new_enqueued_at_);
}

bool TensorQueue::take(int process_set, const std::string& name, TensorEntry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(key_of(process_set, name));
  if (it == in_flight_.end()) return false;
  std::swap(*entry, it->second);
  entry_nodes_.erase_keeping_value(in_flight_, it);
  return true;
}

const void* TensorQueue::input_of(int process_set, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(key_of(process_set, name));
  return it == in_flight_.end() ? nullptr : it->second.input;
}

bool TensorQueue::take(int handle, TensorEntry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = key_of_handle_.find(handle);
  if (key == key_of_handle_.end()) return false;
  auto it = in_flight_.find(key->second);
  if (it == in_flight_.end()) return false;
  std::swap(*entry, it->second);
  entry_nodes_.erase_keeping_value(in_flight_, it);
  return true;
}

std::vector<TensorEntry> TensorQueue::take_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorEntry> out;
  for (auto& kv : in_flight_) out.push_back(std::move(kv.second));
  in_flight_.clear();
  new_requests_.clear();
  new_enqueued_at_.clear();
  return out;
}

std::vector<TensorEntry> TensorQueue::take_all_of(int process_set) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorEntry> out;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.request.process_set == process_set) {
      out.push_back(std::move(it->second));
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void TensorQueue::wait_for_work(std::chrono::microseconds timeout, bool spin) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return woken_ || !new_requests_.empty(); };
  // Tensors tend to come in bursts (a backward pass, a loop of calls): a
  // short yielding spin catches the next one without a sleep/wake round trip.
  const auto spin_until = std::chrono::steady_clock::now() + (spin ? std::min(timeout, spin_) : std::chrono::microseconds(0));
  while (!ready() && std::chrono::steady_clock::now() < spin_until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  work_cv_.wait_for(lock, timeout, ready);
  woken_ = false;
}

void TensorQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  work_cv_.notify_one();
  notify_on_work();
}

bool TensorQueue::has_work() {
  std::lock_guard<std::mutex> lock(mutex_);
  return woken_ || !new_requests_.empty();
}

void TensorQueue::clear_woken() {
  std::lock_guard<std::mutex> lock(mutex_);
  woken_ = false;
}

const std::string& TensorQueue::key_of(int process_set, const std::string& name) {
  key_.clear();
  key_ += std::to_string(process_set);
  key_ += ':';
  key_ += name;
  return key_;
}

void TensorQueue::set_on_work(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(on_work_mutex_);
  on_work_ = std::move(fn);
}

void TensorQueue::notify_on_work() {
  std::lock_guard<std::mutex> lock(on_work_mutex_);
  if (on_work_) on_work_();
}

}  // namespace horo
