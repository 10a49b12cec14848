#include "engine/point_to_point.h"

#include <algorithm>
#include <thread>
#include <tuple>

#include "common/error.h"
#include "transport/peer_watch.h"

namespace horo {

namespace {
// A user's tag T travels as 2T, its answer (the receiver's buffer size) as 2T + 1.
int data_tag(int tag) { return 2 * tag; }
int answer_tag(int tag) { return 2 * tag + 1; }
}  // namespace

void PointToPoint::add_set(int id, Transport* transport, std::vector<int> members) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_[id] = Set{transport, std::move(members)};
}

void PointToPoint::remove_set(int id, const std::string& why) {
  std::vector<std::pair<int, std::string>> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(why, id, &done);
    sets_.erase(id);
  }
  for (auto& d : done) handles_.complete(d.first, d.second);
}

void PointToPoint::fail_all(const std::string& why) {
  std::vector<std::pair<int, std::string>> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(why, -1, &done);
  }
  for (auto& d : done) handles_.complete(d.first, d.second);
}

// The transfers' MPI requests stay posted (MPI cannot take a send back): their
// communicator outlives them, and a buffer may still be written until it is freed.
void PointToPoint::fail_locked(const std::string& why, int only_set,
                               std::vector<std::pair<int, std::string>>* done) {
  for (auto it = transfers_.begin(); it != transfers_.end();) {
    if (only_set >= 0 && it->set != only_set) {
      ++it;
      continue;
    }
    auto batch = batches_.find(it->handle);
    if (batch != batches_.end()) {
      done->emplace_back(it->handle, "'" + batch->second.name + "': " + why);
      batches_.erase(batch);
      --in_flight_;
    }
    it = transfers_.erase(it);
  }
}

int PointToPoint::start(int set_id, const std::vector<Op>& ops, const std::string& name) {
  std::vector<int> set_peers;
  Transport* transport = nullptr;
  const int handle = handles_.create();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto set = sets_.find(set_id);
    try {
      if (set == sets_.end()) {
        throw ArgumentError("'" + name + "': process set " + std::to_string(set_id) + " does not exist on this rank");
      }
      transport = set->second.transport;
      const std::vector<int>& members = set->second.members;
      const int max_tag = (transport->max_tag() - 1) / 2;
      for (const Op& op : ops) {
        auto at = std::find(members.begin(), members.end(), op.peer);
        if (at == members.end()) {
          throw ArgumentError("'" + name + "': rank " + std::to_string(op.peer) + " is not in process set " +
                      std::to_string(set_id));
        }
        if (op.tag < 0 || op.tag > max_tag) {
          throw ArgumentError("'" + name + "': tag " + std::to_string(op.tag) + " is outside 0.." + std::to_string(max_tag));
        }
        set_peers.push_back(static_cast<int>(at - members.begin()));
      }
    } catch (const Error&) {
      handles_.forget(handle);
      throw;
    }
    if (!ops.empty()) {
      batches_[handle] = Batch{name, ops.size(), ""};
      ++in_flight_;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      transfers_.push_back(Transfer{handle, set_id, transport, ops[i], set_peers[i]});
      Transfer& t = transfers_.back();  // a list's elements stay put: `answer` is posted in place
      try {
        if (t.op.send) {
          t.data_id = transport->post_send(t.op.buffer, t.op.bytes, t.set_peer, data_tag(t.op.tag));
          t.answer_id = transport->post_recv(&t.answer, sizeof(t.answer), t.set_peer, answer_tag(t.op.tag));
          t.answered = true;
        } else {
          t.data_id = transport->post_recv(t.op.buffer, t.op.bytes, t.set_peer, data_tag(t.op.tag));
        }
      } catch (const Error& e) {
        // What was posted of this batch finishes; the rest never will.
        transfers_.pop_back();
        Batch& batch = batches_[handle];
        batch.error = "'" + name + "': " + e.what();
        batch.remaining -= ops.size() - i;
        break;
      }
    }
  }
  if (ops.empty()) handles_.complete(handle, "");
  progress();  // completes a batch whose posting failed outright
  return handle;
}

bool PointToPoint::advance(Transfer& t, bool may_answer) {
  Batch& batch = batches_.at(t.handle);
  auto fail = [&](const std::string& why) {
    if (!batch.error.empty()) return;
    batch.error = "'" + batch.name + "': " + (t.op.send ? "send of " : "recv of ") + std::to_string(t.op.bytes) +
                  " bytes " + (t.op.send ? "to" : "from") + " set rank " + std::to_string(t.set_peer) + " (tag " +
                  std::to_string(t.op.tag) + "): " + why;
  };
  Transport& transport = *t.transport;
  size_t received = 0;
  if (!t.data_done) {
    try {
      if (transport.test_posted(t.data_id, &received)) {
        t.data_done = true;
        if (!t.op.send && received != t.op.bytes) {
          fail("the message has " + std::to_string(received) + " bytes; both sides must agree on its size");
        }
      }
    } catch (const Error& e) {
      t.data_done = true;
      fail(std::string(e.what()) + "; both sides must agree on its size");
    }
  }
  if (!t.op.send && t.data_done && !t.answered && may_answer) {
    t.answer = t.op.bytes;
    t.answer_id = transport.post_send(&t.answer, sizeof(t.answer), t.set_peer, answer_tag(t.op.tag));
    t.answered = true;
  }
  if (t.answered && !t.answer_done && transport.test_posted(t.answer_id, &received)) {
    t.answer_done = true;
    if (t.op.send && t.answer != t.op.bytes) {
      fail("the receiver's buffer has " + std::to_string(t.answer) + " bytes; both sides must agree on its size");
    }
  }
  return t.data_done && t.answer_done;
}

bool PointToPoint::progress(int handle, bool unless_busy) {
  if (!in_flight()) return true;
  std::vector<std::pair<int, std::string>> done;
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (unless_busy) {
      if (!lock.try_lock()) return false;
    } else {
      lock.lock();
    }
    // Receives not answered yet, by (set, peer, tag): a later one on the same key waits its
    // turn, so the sender matches each answer to its own message.
    std::vector<std::tuple<int, int, int>> unanswered;
    for (auto it = transfers_.begin(); it != transfers_.end();) {
      Transfer& t = *it;
      const auto key = std::make_tuple(t.set, t.set_peer, t.op.tag);
      const bool may_answer = std::find(unanswered.begin(), unanswered.end(), key) == unanswered.end();
      const bool finished = advance(t, may_answer);
      if (!t.answered) unanswered.push_back(key);
      if (!finished) {
        ++it;
        continue;
      }
      auto batch = batches_.find(t.handle);
      if (--batch->second.remaining == 0) {
        done.emplace_back(t.handle, std::move(batch->second.error));
        batches_.erase(batch);
        --in_flight_;
      }
      it = transfers_.erase(it);
    }
    for (auto batch = batches_.begin(); batch != batches_.end();) {  // posting failed with nothing in flight
      if (batch->second.remaining > 0) {
        ++batch;
        continue;
      }
      done.emplace_back(batch->first, std::move(batch->second.error));
      batch = batches_.erase(batch);
      --in_flight_;
    }
    finished = batches_.count(handle) == 0;
  }
  // Outside the lock: a completion callback may start the next transfer.
  for (auto& d : done) handles_.complete(d.first, d.second);
  return finished;
}

bool PointToPoint::owns(int handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_.count(handle) > 0;
}

// Spins first (a peer's answer is usually microseconds away), then yields, then
// sleeps briefly, as the MPI transport's waits do, so a waiting rank leaves its core to compute.
void PointToPoint::drive(int handle, std::chrono::microseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  WaitDeadline deadline("a point-to-point transfer");
  ++drivers_;
  struct Leave {
    std::atomic<int>& drivers;
    ~Leave() { --drivers; }
  } leave{drivers_};
  for (unsigned spins = 0;; ++spins) {
    if (progress(handle)) return;
    if (spins % 32 != 31) continue;  // a clock read costs more than a test of the transfers
    const auto now = clock::now();
    const auto waited = now - start;
    if (waited >= timeout) return;
    if (waited < std::chrono::microseconds(50)) continue;
    try {
      deadline.poll(now);
    } catch (const PeerUnreachable& e) {
      fail_all(std::string("a peer became unreachable: ") + e.what());
      throw;
    }
    if (waited < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace horo
