#include "engine/controller.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "common/logging.h"
#include "engine/row_layout.h"

namespace horo {

namespace {

constexpr uint64_t kFlagNothingToNegotiate = 1;
constexpr uint64_t kFlagNotShuttingDown = 2;
constexpr uint64_t kFlagJoined = 4;

void set_bit(std::vector<uint64_t>& words, size_t first_word, int bit) {
  words[first_word + bit / 64] |= uint64_t(1) << (bit % 64);
}
void clear_bit(std::vector<uint64_t>& words, size_t first_word, int bit) {
  words[first_word + bit / 64] &= ~(uint64_t(1) << (bit % 64));
}
bool test_bit(const std::vector<uint64_t>& words, size_t first_word, int bit) {
  return (words[first_word + bit / 64] >> (bit % 64)) & 1;
}

// Calls visit(bit) for each bit set in `pick(word index)`, in ascending order. The cycle's loops
// over cache bits walk words, not bits: a cache that has held many names (unnamed async tensors
// are numbered, each a new entry) spans up to its capacity, 1024 bits by default, every cycle.
template <typename Pick, typename Visit>
void for_each_set_bit(size_t nwords, Pick pick, Visit visit) {
  for (size_t w = 0; w < nwords; ++w) {
    for (uint64_t m = pick(w); m != 0; m &= m - 1) visit(static_cast<int>(w * 64 + __builtin_ctzll(m)));
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string format_scale(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

Controller::Controller(Transport& transport, const Tunables& tunables, std::vector<int> members)
    : transport_(transport), shm_(transport.shm()), tunables_(tunables), members_(std::move(members)), cache_(tunables.cache_capacity),
      last_stall_check_(Clock::now()) {}

const Controller::Cycle& Controller::run_cycle(const std::vector<Request>& new_requests, bool shutdown_requested,
                                               FunctionRef<const void*(const Request&)> input_of) {
  const auto now = Clock::now();
  for (const Request& q : new_requests) {
    joined_ |= q.type == CollectiveType::kJoin;
    Pending& p = pending_pool_.append(pending_);  // a kept one: every field is set
    p.request = q;  // into the kept request's buffers
    p.since = now;
    p.cache_bit = -1;
    p.sent = false;
  }

  // Classify what this rank holds against the (identical) caches.
  const int bits = cache_.bit_bound();
  const size_t nwords = (bits + 63) / 64;
  const size_t ready_at = 1, valid_at = 1 + nwords, preloaded_at = 1 + 2 * nwords, located_at = 1 + 3 * nwords;
  // The "preloaded" and "located" bits only where the transport carries data (a capacity every rank shares).
  const bool preloads = shm_ && shm_->preload_capacity() > 0;
  std::vector<uint64_t>& words = words_;
  words.assign(1 + (preloads ? 4 : 2) * nwords, 0);
  std::fill(words.begin() + valid_at, words.begin() + preloaded_at, ~uint64_t(0));
  bool must_negotiate = transport_.rank() == 0 && stall_shutdown_due();
  const double stall_s = tunables_.stall_check_seconds;
  for (auto& p : pending_) {
    if (p.sent) continue;
    p.cache_bit = -1;
    if (!p.request.rejection.empty()) {
      // The refusal must reach the coordinator, and other ranks' namesakes
      // must go there too instead of waiting on a cache bit this rank never sets.
      const int cached = cache_.bit_of(p.request.name);
      if (cached >= 0) clear_bit(words, valid_at, cached);
      must_negotiate = true;
      continue;
    }
    int bit = -1;
    const auto found = cache_.enabled() ? cache_.lookup(p.request, transport_.rank(), transport_.size(), &bit)
                                        : ResponseCache::Lookup::kMiss;
    switch (found) {
      case ResponseCache::Lookup::kHit: {
        // A cached tensor other ranks never submit would stall invisibly; after
        // the stall time it is evicted so the coordinator can name the missing ranks.
        const bool stalled = stall_s > 0 && std::chrono::duration<double>(now - p.since).count() > stall_s;
        if (stalled) {
          clear_bit(words, valid_at, bit);
        } else {
          p.cache_bit = bit;
          set_bit(words, ready_at, bit);
        }
        break;
      }
      case ResponseCache::Lookup::kStale:
        clear_bit(words, valid_at, bit);
        break;
      case ResponseCache::Lookup::kMiss:
        break;
    }
    if (p.cache_bit < 0) must_negotiate = true;
  }
  if (joined_) {
    // A joined rank is ready for every cached allreduce (it contributes the
    // identity); any other cached collective must be renegotiated, so the
    // coordinator can tell its callers it cannot run without this rank.
    for (int bit = 0; bit < bits; ++bit) {
      if (!cache_.contains(bit)) continue;
      if (cache_.get(bit).request.type == CollectiveType::kAllreduce) {
        set_bit(words, ready_at, bit);
      } else {
        clear_bit(words, valid_at, bit);
      }
    }
  }
  bool located = false;
  const int preloaded = preloads ? preload_first_ready(input_of, &located) : -1;
  if (preloaded >= 0) set_bit(words, located ? located_at : preloaded_at, preloaded);
  words[0] = (must_negotiate ? 0 : kFlagNothingToNegotiate) | (shutdown_requested ? 0 : kFlagNotShuttingDown) |
             (joined_ ? kFlagJoined : 0);

  transport_.allreduce_bitand(words);

  Cycle& cycle = cycle_;
  response_pool_.clear(cycle.responses);
  cycle.shutdown = !(words[0] & kFlagNotShuttingDown);

  // Evictions first (some rank saw a different signature or a stall), so
  // the local requests waiting on those bits go to the coordinator instead.
  // (The valid words start all ones, padding bits included, and only real bits are cleared.)
  for_each_set_bit(nwords, [&](size_t w) { return ~words[valid_at + w]; }, [&](int bit) {
    cache_.erase(bit);
    for (auto& p : pending_) {
      if (!p.sent && p.cache_bit == bit) p.cache_bit = -1;
    }
  });
  // Cached tensors ready everywhere, in bit order (the same on every rank).
  // Once every rank has joined, nobody holds them: nothing runs from the cache.
  const bool all_joined = words[0] & kFlagJoined;
  std::vector<bool>& ran = ran_;
  ran.assign(pending_.size(), false);
  auto ready_and_valid = [&](size_t w) { return all_joined ? 0 : words[ready_at + w] & words[valid_at + w]; };
  for_each_set_bit(nwords, ready_and_valid, [&](int bit) {
    response_pool_.append(cycle.responses) = cache_.get(bit);
    // Every rank's input, or every rank's output's location (Executor: take_preloaded_output).
    cycle.responses.back().preloaded = preloads && (test_bit(words, preloaded_at, bit) || test_bit(words, located_at, bit));
    cache_.touch(bit);
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (!pending_[i].sent && pending_[i].cache_bit == bit) ran[i] = true;
    }
  });

  if (!(words[0] & kFlagNothingToNegotiate)) {
    std::vector<Request> mine;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      if (ran[i] || p.sent || p.cache_bit >= 0) continue;
      p.sent = true;
      p.request.rank = transport_.rank();
      mine.push_back(p.request);
    }
    std::vector<std::string> gathered = transport_.gather_bytes(encode_requests(mine), 0);
    std::string answer;
    if (transport_.rank() == 0) answer = encode_responses(coordinate(gathered));
    transport_.broadcast_bytes(answer, 0);
    for (Response& response : decode_responses(answer)) {
      if (response.request.type == CollectiveType::kJoin) joined_ = false;
      if (response.kind == Response::Kind::kExecute && response.request.type != CollectiveType::kJoin) {
        cache_.put(response);
      }
      // A refusal and a later namesake may both be pending: mark the one answered.
      const bool refused_here = response.kind == Response::Kind::kError &&
                                std::find(response.per_rank.begin(), response.per_rank.end(), transport_.rank()) !=
                                    response.per_rank.end();
      for (size_t i = 0; i < pending_.size(); ++i) {
        const Pending& p = pending_[i];
        if (ran[i] || !p.sent || p.request.name != response.request.name) continue;
        if (p.request.rejection.empty() == refused_here) continue;
        ran[i] = true;
        break;
      }
      response_pool_.append(cycle.responses) = std::move(response);
    }
  } else if (transport_.rank() == 0) {
    inspect_stalls(nullptr, now);  // warnings only; errors need a negotiation round
  }

  size_t keep = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (ran[i]) continue;
    if (keep != i) std::swap(pending_[keep], pending_[i]);  // swapped: both keep their buffers
    ++keep;
  }
  pending_pool_.truncate(pending_, keep);
  return cycle;
}

int Controller::preload_first_ready(FunctionRef<const void*(const Request&)> input_of, bool* located) {
  const Pending* first = nullptr;
  for (const Pending& p : pending_) {
    if (!p.sent && p.cache_bit >= 0 && (!first || p.cache_bit < first->cache_bit)) first = &p;
  }
  int64_t bytes = -1;
  const void* input = nullptr;
  bool rooted = false;
  // A joined rank stands in with identity values, which it holds nowhere to send.
  if (first && !joined_) {
    // Callers name roots by global rank.
    const auto root = std::find(members_.begin(), members_.end(), first->request.root);
    bytes = shm_->preload_bytes(first->request, static_cast<int>(root - members_.begin()));
    const CollectiveType type = first->request.type;
    rooted = type == CollectiveType::kBroadcast || type == CollectiveType::kScatter;
    // The root alone decides (the others preload nothing): its "no" is everyone's in the control step's AND.
    const bool direct = rooted && bytes > 0 && shm_->moves_rooted_directly(type, static_cast<size_t>(bytes));
    if (bytes >= 0 && static_cast<size_t>(bytes) <= shm_->preload_capacity() && !direct) {
      input = input_of(first->request);
    }
  }
  if (!input) {
    shm_->preload(nullptr, 0, false);  // the cycle counts all the same
    *located = first && !joined_ && bytes < 0 && preload_output(first->request, cache_.get(first->cache_bit));
    return *located ? first->cache_bit : -1;
  }
  shm_->preload(input, static_cast<size_t>(bytes), rooted);
  return first->cache_bit;
}

bool Controller::preload_output(const Request& q, const Response& agreed) {
  // It saves the exchange the step that says where outputs lie.
  const bool alltoall = q.type == CollectiveType::kAlltoall;
  const bool allgather = q.type == CollectiveType::kAllgather && tunables_.allgather_algo != "ring";
  if (!(alltoall || allgather) || q.memory != Memory::kHost) return false;
  const int n = transport_.size();
  const size_t row_bytes = row_elements(q.shape) * dtype_size(q.dtype);
  recv_at_.resize(n);
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    recv_at_[r] = total;
    total += rows_received(agreed.per_rank, alltoall, n, transport_.rank(), r) * row_bytes;
  }
  return shm_->preload_output(total, recv_at_);
}

std::vector<Response> Controller::coordinate(const std::vector<std::string>& gathered) {
  const int n = transport_.size();
  const auto now = Clock::now();
  if (joined_ranks_.empty()) joined_ranks_.assign(n, false);
  for (int r = 0; r < n; ++r) {
    for (Request& q : decode_requests(gathered[r])) {
      if (q.type == CollectiveType::kJoin) {
        joined_ranks_[r] = true;
        last_joined_ = r;
        continue;
      }
      add_to_table(r, std::move(q), now);
    }
  }
  std::vector<Response> responses;
  size_t keep = 0;
  for (size_t i = 0; i < table_order_.size(); ++i) {
    const std::string name = table_order_[i];  // a copy: replaying later_ appends to table_order_
    auto it = table_.find(name);
    const TableEntry& entry = it->second;
    if (entry.count == n) {
      bool any_refused = false;
      for (const Request& q : entry.by_rank) any_refused |= !q.rejection.empty();
      if (any_refused) {
        responses.push_back(refused(name, entry));
        table_.erase(it);
        replay_later(name, now);
        continue;
      }
    }
    // Ranks that joined count as having submitted; the others are compared.
    TableEntry present;
    std::vector<int> stand_ins;
    for (int r = 0; r < n; ++r) {
      if (entry.present[r]) {
        present.by_rank.push_back(entry.by_rank[r]);
      } else if (joined_ranks_[r]) {
        stand_ins.push_back(r);
      }
    }
    if (static_cast<int>(present.by_rank.size() + stand_ins.size()) == n) {
      const Request& first = present.by_rank.front();
      if (!stand_ins.empty() && first.type != CollectiveType::kAllreduce) {
        Response error;
        error.kind = Response::Kind::kError;
        error.request = first;
        error.error = std::string(collective_name(first.type)) + " '" + name + "': rank(s) " +
                      rank_list(stand_ins) + " have called join(); only allreduce goes on until every rank joins";
        responses.push_back(std::move(error));
      } else {
        responses.push_back(stand_ins.empty() ? match(name, entry) : match(name, present));
      }
      table_.erase(it);
      replay_later(name, now);
    } else {
      table_order_[keep++] = name;
    }
  }
  table_order_.resize(keep);
  inspect_stalls(&responses, now);
  if (std::all_of(joined_ranks_.begin(), joined_ranks_.end(), [](bool j) { return j; })) {
    Response join;
    join.request.type = CollectiveType::kJoin;
    join.request.name = "join";
    join.per_rank = {last_joined_};
    responses.push_back(std::move(join));
    joined_ranks_.assign(n, false);
  }
  return responses;
}

void Controller::add_to_table(int r, Request q, Clock::time_point now) {
  const int n = transport_.size();
  const std::string name = q.name;
  auto [it, inserted] = table_.try_emplace(name);
  TableEntry& entry = it->second;
  if (inserted) {
    entry.by_rank.resize(n);
    entry.present.assign(n, false);
    entry.first_seen = now;
    table_order_.push_back(name);
  }
  if (entry.present[r]) {
    later_[name].push_back(std::move(q));
    return;
  }
  ++entry.count;
  entry.present[r] = true;
  entry.by_rank[r] = std::move(q);
}

void Controller::replay_later(const std::string& name, Clock::time_point now) {
  auto it = later_.find(name);
  if (it == later_.end()) return;
  std::vector<Request> waiting = std::move(it->second);
  later_.erase(it);
  for (Request& q : waiting) add_to_table(q.rank, std::move(q), now);
}

Response Controller::refused(const std::string& name, const TableEntry& entry) const {
  Response error;
  error.kind = Response::Kind::kError;
  std::vector<int> refusing;
  std::string why;
  for (int r = 0; r < static_cast<int>(entry.by_rank.size()); ++r) {
    const Request& q = entry.by_rank[r];
    if (q.rejection.empty()) continue;
    refusing.push_back(r);
    error.per_rank.push_back(r);
    if (why.empty()) why = q.rejection;
  }
  error.request = entry.by_rank[refusing.front()];
  error.request.rejection.clear();
  error.error = std::string(collective_name(error.request.type)) + " '" + name + "': rank(s) " + rank_list(refusing) +
                " refused it when it was submitted, so it runs on no rank (rank " + std::to_string(refusing.front()) +
                ": " + why + ")";
  return error;
}

Response Controller::match(const std::string& name, const TableEntry& entry) const {
  const Request& first = entry.by_rank[0];
  const int n = static_cast<int>(entry.by_rank.size());
  Response response;
  response.request = first;
  const std::string kind = collective_name(first.type);
  auto fail = [&](const std::string& why) {
    response.kind = Response::Kind::kError;
    response.error = kind + " '" + name + "': " + why;
    return true;
  };
  // Names the first property that differs, with every rank's value.
  auto differ = [&](const char* what, auto value_of) {
    for (int r = 1; r < n; ++r) {
      if (value_of(entry.by_rank[r]) == value_of(first)) continue;
      std::string values;
      for (int k = 0; k < n; ++k) values += (k ? ", rank " : "rank ") + std::to_string(k) + " " + value_of(entry.by_rank[k]);
      return fail(std::string(what) + " differs across ranks: " + values);
    }
    return false;
  };
  auto trailing_dims = [](const Request& q) {
    Request rest = q;
    if (!rest.shape.empty()) rest.shape.erase(rest.shape.begin());
    return std::to_string(q.shape.size()) + "-d, " + rest.shape_string() + " after the first dimension";
  };
  const CollectiveType type = first.type;
  const bool ragged = type == CollectiveType::kAllgather || type == CollectiveType::kAlltoall ||
                      type == CollectiveType::kGather;
  const bool reduces = type == CollectiveType::kAllreduce || type == CollectiveType::kReducescatter ||
                       type == CollectiveType::kReduce;
  const bool rooted = type == CollectiveType::kBroadcast || type == CollectiveType::kGather ||
                      type == CollectiveType::kScatter || type == CollectiveType::kReduce;
  if (differ("collective", [](const Request& q) { return std::string(collective_name(q.type)); })) return response;
  if (first.type == CollectiveType::kBarrier) return response;
  if (type == CollectiveType::kAddProcessSet) {
    auto ranks = [](const Request& q) {
      Request shown = q;
      shown.shape = q.splits;
      return shown.shape_string();
    };
    if (differ("ranks", ranks)) return response;
    bool valid = !first.splits.empty();
    for (size_t i = 0; i < first.splits.size(); ++i) {
      valid &= first.splits[i] >= 0 && first.splits[i] < n && (i == 0 || first.splits[i] > first.splits[i - 1]);
    }
    if (!valid) fail("ranks " + ranks(first) + " must be distinct ranks of the " + std::to_string(n) + " in the job");
    return response;
  }
  if (type == CollectiveType::kRemoveProcessSet) {
    differ("process set id", [](const Request& q) { return std::to_string(q.root); });
    return response;
  }
  if (differ("dtype", [](const Request& q) { return std::string(dtype_name(q.dtype)); })) return response;
  if (differ("memory", [](const Request& q) { return std::string(memory_name(q.memory)); })) return response;
  if (ragged ? differ("shape", trailing_dims) : differ("shape", [](const Request& q) { return q.shape_string(); })) {
    return response;
  }
  if (reduces && (differ("reduction op", [](const Request& q) { return std::string(op_name(q.op)); }) ||
                  differ("prescale_factor", [](const Request& q) { return format_scale(q.prescale); }) ||
                  differ("postscale_factor", [](const Request& q) { return format_scale(q.postscale); }))) {
    return response;
  }
  if (rooted) {
    if (differ("root rank", [](const Request& q) { return std::to_string(q.root); })) return response;
    if (std::find(members_.begin(), members_.end(), first.root) == members_.end()) {
      std::vector<int64_t> ranks(members_.begin(), members_.end());
      Request shown;
      shown.shape = ranks;
      fail("root rank " + std::to_string(first.root) + " is not one of the ranks taking part " + shown.shape_string());
      return response;
    }
  }
  if (type == CollectiveType::kReducescatter && first.shape.empty()) {
    fail("a 0-d tensor cannot be scattered across ranks; give it a first dimension");
    return response;
  }
  if (type == CollectiveType::kAllgather || type == CollectiveType::kGather) {
    for (const Request& q : entry.by_rank) response.per_rank.push_back(q.shape[0]);
  }
  if (first.type == CollectiveType::kAlltoall) {
    for (int r = 0; r < n; ++r) {
      const Request& q = entry.by_rank[r];
      if (q.splits.empty()) {  // no splits given, and the rows do not divide evenly (horo/alltoall.py)
        fail("rank " + std::to_string(r) + "'s first dimension " + std::to_string(q.shape[0]) +
             " does not divide by the " + std::to_string(n) + " ranks; pass splits= to send uneven parts");
        return response;
      }
      int64_t sum = 0;
      bool negative = false;
      for (int64_t s : q.splits) {
        sum += s;
        negative |= s < 0;
      }
      if (static_cast<int>(q.splits.size()) != n || negative || sum != q.shape[0]) {
        Request shown = q;
        shown.shape = q.splits;
        fail("rank " + std::to_string(r) + "'s splits " + shown.shape_string() + " must be " + std::to_string(n) +
             " non-negative row counts summing to its first dimension " + std::to_string(q.shape[0]));
        return response;
      }
    }
    for (const Request& q : entry.by_rank) {
      response.per_rank.insert(response.per_rank.end(), q.splits.begin(), q.splits.end());
    }
  }
  return response;
}

bool Controller::stall_shutdown_due() const {
  if (tunables_.stall_shutdown_seconds <= 0) return false;
  const auto now = Clock::now();
  for (const auto& kv : table_) {
    if (std::chrono::duration<double>(now - kv.second.first_seen).count() > tunables_.stall_shutdown_seconds) {
      return true;
    }
  }
  return false;
}

void Controller::inspect_stalls(std::vector<Response>* errors, Clock::time_point now) {
  if (errors == nullptr && now - last_stall_check_ < std::chrono::seconds(1)) return;
  last_stall_check_ = now;
  const double check_s = tunables_.stall_check_seconds, shutdown_s = tunables_.stall_shutdown_seconds;
  size_t keep = 0;
  for (size_t i = 0; i < table_order_.size(); ++i) {
    const std::string name = table_order_[i];
    TableEntry& entry = table_[name];
    const double age = std::chrono::duration<double>(now - entry.first_seen).count();
    std::vector<int> have, missing;
    for (int r = 0; r < static_cast<int>(entry.present.size()); ++r) (entry.present[r] ? have : missing).push_back(r);
    const std::string kind = collective_name(entry.by_rank[have.front()].type);
    if (errors && shutdown_s > 0 && age > shutdown_s) {
      Response error;
      error.kind = Response::Kind::kError;
      error.request = entry.by_rank[have.front()];
      error.request.rejection.clear();
      for (int r : have) {
        if (!entry.by_rank[r].rejection.empty()) error.per_rank.push_back(r);
      }
      error.error = kind + " '" + name + "': rank(s) " + rank_list(missing) + " did not submit it within " +
                    format_scale(shutdown_s) + " s (HORO_STALL_SHUTDOWN_TIME_SECONDS); submitted by rank(s) " +
                    rank_list(have);
      errors->push_back(std::move(error));
      table_.erase(name);
      replay_later(name, now);
      continue;
    }
    if (check_s > 0 && age > check_s && !entry.warned) {
      entry.warned = true;
      HORO_LOG(kLogWarning, "stall: " << kind << " '" << name << "' submitted by rank(s) " << rank_list(have)
                                      << " has waited " << static_cast<int>(age) << " s for rank(s) "
                                      << rank_list(missing));
    }
    table_order_[keep++] = name;
  }
  table_order_.resize(keep);
}

}  // namespace horo
