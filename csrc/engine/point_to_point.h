// Users' point-to-point (horo.send / recv / isend / irecv and their batch): posted at
// once on the caller's thread over the process set's transport (Transport::post_send /
// post_recv), with no negotiation, so it never waits behind a collective, and driven to
// completion by whichever thread waits or polls (and by the background loop meanwhile).
//
// Every message is answered by its receiver with the size of its buffer, on the tag's
// twin: a size mismatch raises on both sides, and a send completes once it was received.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/handle_table.h"
#include "transport/transport.h"

namespace horo {

class PointToPoint {
 public:
  struct Op {
    bool send = true;
    void* buffer = nullptr;  // read by a send, written by a receive
    size_t bytes = 0;
    int peer = 0;  // global rank
    int tag = 0;
  };

  explicit PointToPoint(HandleTable& handles) : handles_(handles) {}

  // The transports of this rank's process sets (members: global ranks in set-rank order).
  // Removing a set fails its transfers in flight with `why`.
  void add_set(int id, Transport* transport, std::vector<int> members);
  void remove_set(int id, const std::string& why);
  // Fails everything in flight (shutdown, a lost peer).
  void fail_all(const std::string& why);

  // Posts `ops` together; the returned handle completes once every one has. `name` names
  // them in errors. Throws ArgumentError (posting nothing) for a peer outside the set or a bad tag.
  int start(int set_id, const std::vector<Op>& ops, const std::string& name);
  // Tests what is in flight: completes finished handles and answers arrived messages. Any thread.
  // True once `handle` is no longer in flight. `unless_busy`: returns false at once where
  // another thread is testing them.
  bool progress(int handle = -1, bool unless_busy = false);
  // Whether a thread waits in drive(): it moves every transfer along, nobody else need.
  bool driven() const { return drivers_.load(std::memory_order_relaxed) > 0; }
  // Drives progress until `handle` completes or `timeout` passes. Throws PeerUnreachable
  // (after failing everything in flight) once a peer it waits for is gone.
  void drive(int handle, std::chrono::microseconds timeout);
  bool in_flight() const { return in_flight_.load(std::memory_order_relaxed) > 0; }
  bool owns(int handle);

 private:
  struct Set {
    Transport* transport;
    std::vector<int> members;
  };
  struct Transfer {
    int handle;
    int set;
    Transport* transport;
    Op op;
    int set_peer;      // the peer's rank in the set
    int data_id = -1;  // Transport::post_* ids; -1: not posted (or done)
    int answer_id = -1;
    uint64_t answer = 0;  // the receiver's buffer size, sent back to the sender
    bool data_done = false;
    bool answered = false;  // a receive has posted its answer; a send has it
    bool answer_done = false;
  };
  struct Batch {
    std::string name;
    size_t remaining;
    std::string error;
  };
  // Tests `t` once; true when it is finished (its error, if any, added to its batch).
  bool advance(Transfer& t, bool may_answer);
  void fail_locked(const std::string& why, int only_set, std::vector<std::pair<int, std::string>>* done);

  HandleTable& handles_;
  std::mutex mutex_;
  std::map<int, Set> sets_;
  std::list<Transfer> transfers_;  // in post order: a pair's same-tag answers go out in it
  std::unordered_map<int, Batch> batches_;
  std::atomic<int> in_flight_{0};  // batches
  std::atomic<int> drivers_{0};
};

}  // namespace horo
