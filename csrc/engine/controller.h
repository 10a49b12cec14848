// The coordination protocol, and nothing about moving tensor bytes.
//
// Each cycle every rank joins one bit-vector AND: a flag word, one "ready"
// bit per cached response and one "still valid" bit per cached response.
// Cached tensors ready on every rank run straight from that AND. Only when
// some rank holds a tensor the cache cannot express do the ranks gather
// their new requests at the coordinator (rank 0), which matches them by name,
// checks that every rank described the tensor the same way, and broadcasts
// the list of responses. Every rank then executes the same list in the same
// order, so ranks may enqueue in different orders without deadlock.
// Where the transport carries data with the AND (shared memory), each rank
// also sends the input of its first cached tensor, and sets that tensor's bit
// in a third bit vector: a bit still set after the AND means every rank sent
// that tensor's input, and it runs from there without a step of its own.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/element_pool.h"
#include "common/function_ref.h"
#include "common/tunables.h"
#include "engine/response_cache.h"
#include "transport/transport.h"
#include "wire/messages.h"

namespace horo {

class Controller {
 public:
  // `members`: the global ranks of this process set, in set-rank order.
  Controller(Transport& transport, const Tunables& tunables, std::vector<int> members);

  struct Cycle {
    std::vector<Response> responses;  // identical on every rank, in execution order
    bool shutdown = false;            // some rank asked to shut down
  };
  // Collective: every rank must call it once per cycle. Copies `new_requests`' elements.
  // `input_of`: the buffer of this rank's in-flight tensor for a request (nullptr: none).
  // The cycle is this controller's, valid until its next run_cycle(): its
  // lists are refilled by assignment, so a cycle like the last allocates nothing.
  const Cycle& run_cycle(const std::vector<Request>& new_requests, bool shutdown_requested,
                         FunctionRef<const void*(const Request&)> input_of);

  // Local requests still waiting for other ranks.
  bool has_pending() const { return !pending_.empty(); }
  // This rank called join() and, until every rank has, stands in for the
  // others' allreduces with identity values.
  bool joined() const { return joined_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Request request;
    Clock::time_point since;
    int cache_bit = -1;  // >= 0: waiting on that bit
    bool sent = false;   // handed to the coordinator
  };
  // Coordinator (rank 0) state: requests per tensor name until every rank has one.
  struct TableEntry {
    std::vector<Request> by_rank;  // index = rank
    std::vector<bool> present;
    int count = 0;
    Clock::time_point first_seen;
    bool warned = false;
  };

  // Hands the transport the input of this rank's first cached tensor ready to run,
  // where its collective can run from there; returns its bit (-1: none). Only where
  // the transport carries data (preload_capacity() > 0); every cycle, to count it.
  // Or, for an exchange too large for that, has it lay out the tensor's output where its peers
  // can write into it and say where (ShmCapabilities::preload_output): then `located`. The control step
  // ANDs the two kinds apart (a rank's input may fit where its peers' do not).
  int preload_first_ready(FunctionRef<const void*(const Request&)> input_of, bool* located);
  bool preload_output(const Request& q, const Response& agreed);
  std::vector<Response> coordinate(const std::vector<std::string>& gathered);
  // Files rank r's request under its name, or behind the entry there when r
  // is already in it (the ranks' n-th submissions of a name meet each other).
  void add_to_table(int r, Request request, Clock::time_point now);
  void replay_later(const std::string& name, Clock::time_point now);
  Response refused(const std::string& name, const TableEntry& entry) const;
  Response match(const std::string& name, const TableEntry& entry) const;
  void inspect_stalls(std::vector<Response>* errors, Clock::time_point now);
  bool stall_shutdown_due() const;

  Transport& transport_;
  ShmCapabilities* shm_;  // the transport's, or nullptr: then nothing is preloaded
  const Tunables& tunables_;
  const std::vector<int> members_;
  ResponseCache cache_;
  std::vector<Pending> pending_;
  ElementPool<Pending> pending_pool_;
  Cycle cycle_;
  ElementPool<Response> response_pool_;
  // run_cycle()'s cache bits and which pending requests ran, kept for their capacity.
  std::vector<uint64_t> words_;
  std::vector<size_t> recv_at_;  // preload_output()'s, kept from cycle to cycle
  std::vector<bool> ran_;
  std::map<std::string, TableEntry> table_;
  std::vector<std::string> table_order_;  // names in arrival order, for response order
  // Requests of ranks already in the table's entry for that name, in arrival
  // order (only refusals make a rank run ahead of the others on one name).
  std::map<std::string, std::vector<Request>> later_;
  Clock::time_point last_stall_check_;
  bool joined_ = false;
  std::vector<bool> joined_ranks_;  // coordinator
  int last_joined_ = -1;            // coordinator
};

}  // namespace horo
