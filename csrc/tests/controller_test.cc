// The controller's negotiation, rank 0 matching every rank's requests, over a transport whose
// ranks are threads of this process (ThreadTransport below: the control plane only, bytes
// exchanged through memory). No MPI: these reach the matching, the cache and the refusals
// directly, where the Python suites see them only through mpirun.
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "engine/controller.h"

namespace horo {
namespace {

// What every rank's thread shares: a reusable barrier and one slot per rank.
class Hub {
 public:
  explicit Hub(int size) : words_(size), bytes_(size), size_(size) {}
  int size() const { return size_; }
  // Returns when every rank has arrived (generation counting, so it can be reused at once).
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
    } else {
      all_arrived_.wait(lock, [&] { return generation_ != generation; });
    }
  }
  std::vector<std::vector<uint64_t>> words_;
  std::vector<std::string> bytes_;

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  long generation_ = 0;
};

// The controller's control plane between threads. The data plane is never used by the
// controller; it throws so a call there would fail the test, not pass silently.
class ThreadTransport : public Transport {
 public:
  ThreadTransport(Hub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }

  void allreduce_bitand(std::vector<uint64_t>& words) override {
    ++control_steps;
    hub_.words_[rank_] = words;
    hub_.arrive();
    for (const auto& theirs : hub_.words_) {
      if (theirs.size() != words.size()) throw Error("ranks disagree on the control words' length");
      for (size_t i = 0; i < words.size(); ++i) words[i] &= theirs[i];
    }
    hub_.arrive();  // nobody overwrites a slot before every rank has read it
  }
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override {
    ++gathers;
    hub_.bytes_[rank_] = mine;
    hub_.arrive();
    std::vector<std::string> all;
    if (rank_ == root) all = hub_.bytes_;
    hub_.arrive();
    return all;
  }
  void broadcast_bytes(std::string& data, int root) override {
    if (rank_ == root) hub_.bytes_[root] = data;
    hub_.arrive();
    if (rank_ != root) data = hub_.bytes_[root];
    hub_.arrive();
  }

  int control_steps = 0;
  int gathers = 0;

 private:
  [[noreturn]] static void unused() { throw Error("the controller moved tensor data"); }
  int isend(const void*, size_t, int) override { unused(); }
  int irecv(void*, size_t, int) override { unused(); }
  void wait(int) override { unused(); }
  void wait_all() override { unused(); }
  int post_send(const void*, size_t, int, int) override { unused(); }
  int post_recv(void*, size_t, int, int) override { unused(); }
  bool test_posted(int, size_t*) override { unused(); }
  int max_tag() const override { unused(); }
  bool native_allreduce(const void*, void*, size_t, DataType, ReduceOp) override { unused(); }
  bool native_reduce_scatter(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp) override { unused(); }
  void native_allgatherv(const void*, void*, const std::vector<size_t>&) override { unused(); }
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override { unused(); }
  void broadcast(void*, size_t, int) override { unused(); }
  void gatherv(const void*, void*, const std::vector<size_t>&, int) override { unused(); }
  void scatterv(const void*, const std::vector<size_t>&, void*, int) override { unused(); }
  bool native_reduce(const void*, void*, size_t, DataType, ReduceOp, int) override { unused(); }
  void barrier() override { unused(); }
  std::unique_ptr<Transport> split(const std::vector<int>&) override { unused(); }

  Hub& hub_;
  int rank_;
};

Request tensor(const std::string& name, std::vector<int64_t> shape = {8}, DataType dtype = DataType::kFloat32) {
  Request q;
  q.name = name;
  q.shape = std::move(shape);
  q.dtype = dtype;
  return q;
}

struct Answer {
  Response::Kind kind;
  std::string name;
  std::string error;
  std::vector<int64_t> per_rank;
  bool operator==(const Answer& o) const {
    return kind == o.kind && name == o.name && error == o.error && per_rank == o.per_rank;
  }
};

// Every rank's cycles: requests[rank][cycle] go in at that cycle; returns what each rank's
// controller answered at each cycle, and leaves each rank's transport counters in `steps`.
struct World {
  std::vector<std::vector<std::vector<Answer>>> answers;  // [rank][cycle]
  std::vector<int> control_steps, gathers;
  std::vector<bool> pending_after;
};

World run(const std::vector<std::vector<std::vector<Request>>>& requests, int cache_capacity = 1024,
          std::vector<bool> shutdown_at = {}) {
  const int size = static_cast<int>(requests.size());
  const size_t cycles = requests[0].size();
  Tunables tunables = Tunables::from_environment();
  tunables.cache_capacity = cache_capacity;
  tunables.stall_check_seconds = 0;  // no warnings or evictions from a slow test machine
  tunables.stall_shutdown_seconds = 0;
  Hub hub(size);
  World world;
  world.answers.resize(size);
  world.control_steps.resize(size);
  world.gathers.resize(size);
  world.pending_after.resize(size);
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  std::vector<int> members;
  for (int r = 0; r < size; ++r) members.push_back(r);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadTransport transport(hub, r);
        Controller controller(transport, tunables, members);
        for (size_t c = 0; c < cycles; ++c) {
          const bool stop = c < shutdown_at.size() && shutdown_at[c] && r == size - 1;
          const auto& cycle = controller.run_cycle(requests[r][c], stop, [](const Request&) -> const void* {
            return nullptr;
          });
          world.answers[r].emplace_back();
          for (const Response& p : cycle.responses) {
            world.answers[r].back().push_back({p.kind, p.request.name, p.error, p.per_rank});
          }
          if (cycle.shutdown) world.answers[r].back().push_back({Response::Kind::kExecute, "(shutdown)", "", {}});
        }
        world.control_steps[r] = transport.control_steps;
        world.gathers[r] = transport.gathers;
        world.pending_after[r] = controller.has_pending();
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  return world;
}

std::vector<std::string> names(const std::vector<Answer>& answers) {
  std::vector<std::string> out;
  for (const auto& a : answers) out.push_back(a.name);
  return out;
}

TEST(Controller, RanksThatSubmitInDifferentOrdersRunTheSameListInTheSameOrder) {
  const World w = run({{{tensor("a"), tensor("b"), tensor("c")}},
                       {{tensor("c"), tensor("a"), tensor("b")}},
                       {{tensor("b"), tensor("c"), tensor("a")}}});
  ASSERT_EQ(w.answers[0][0].size(), 3u);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(w.answers[r][0], w.answers[0][0]) << "rank " << r;
  std::vector<std::string> got = names(w.answers[0][0]);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
  for (const auto& a : w.answers[0][0]) EXPECT_EQ(a.kind, Response::Kind::kExecute);
}

TEST(Controller, ATensorRunsOnlyOnceEveryRankHasSubmittedIt) {
  // Rank 2 submits "late" one cycle after the others.
  const World w = run({{{tensor("late")}, {}}, {{tensor("late")}, {}}, {{}, {tensor("late")}}});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(w.answers[r][0].empty()) << "rank " << r << " ran it before rank 2 had it";
    EXPECT_EQ(names(w.answers[r][1]), std::vector<std::string>{"late"});
    EXPECT_FALSE(w.pending_after[r]);
  }
}

TEST(Controller, AMismatchIsAnErrorOnEveryRankNamingTheTensorAndEachRanksValue) {
  const World w = run({{{tensor("w", {4, 3})}}, {{tensor("w", {4, 5})}}, {{tensor("w", {4, 3})}}});
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(w.answers[r][0].size(), 1u);
    EXPECT_EQ(w.answers[r][0][0], w.answers[0][0][0]);
  }
  const Answer& a = w.answers[0][0][0];
  EXPECT_EQ(a.kind, Response::Kind::kError);
  EXPECT_NE(a.error.find("'w'"), std::string::npos) << a.error;
  EXPECT_NE(a.error.find("rank 1 [4, 5]"), std::string::npos) << a.error;

  const World dtypes = run({{{tensor("d", {2}, DataType::kFloat32)}}, {{tensor("d", {2}, DataType::kFloat64)}}});
  EXPECT_EQ(dtypes.answers[1][0].at(0).kind, Response::Kind::kError);
  EXPECT_NE(dtypes.answers[1][0][0].error.find("'d'"), std::string::npos);
}

TEST(Controller, ARefusalOnOneRankFailsTheTensorOnEveryRank) {
  Request refused = tensor("r");
  refused.rejection = "a read-only buffer";
  const World w = run({{{tensor("r")}}, {{refused}}});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(w.answers[r][0].size(), 1u) << "rank " << r;
    const Answer& a = w.answers[r][0][0];
    EXPECT_EQ(a.kind, Response::Kind::kError);
    EXPECT_EQ(a.per_rank, std::vector<int64_t>{1}) << "the ranks that refused it";
    EXPECT_NE(a.error.find("rank(s) 1 refused it"), std::string::npos) << a.error;
    EXPECT_NE(a.error.find("a read-only buffer"), std::string::npos) << a.error;
  }
}

TEST(Controller, TheSteadyStateRunsFromTheCacheWithOneControlStepACycle) {
  // The same two tensors three times: negotiated once, then cached.
  const std::vector<std::vector<Request>> cycles(3, {tensor("g1"), tensor("g2")});
  const World w = run({cycles, cycles});
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      std::vector<std::string> got = names(w.answers[r][c]);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, (std::vector<std::string>{"g1", "g2"})) << "rank " << r << " cycle " << c;
    }
    EXPECT_EQ(w.control_steps[r], 3);
    EXPECT_EQ(w.gathers[r], 1) << "only the first cycle gathers requests at the coordinator";
  }
  // Without the cache every cycle negotiates.
  const World uncached = run({cycles, cycles}, /*cache_capacity=*/0);
  EXPECT_EQ(uncached.gathers[0], 3);
}

TEST(Controller, ANewSignatureUnderACachedNameIsRenegotiated) {
  const World w = run({{{tensor("x", {8})}, {tensor("x", {8})}}, {{tensor("x", {8})}, {tensor("x", {9})}}});
  // Cycle 1: rank 1's "x" no longer matches the cached response, so the ranks negotiate and
  // the coordinator finds the shapes differ.
  ASSERT_EQ(w.answers[0][1].size(), 1u);
  EXPECT_EQ(w.answers[0][1][0].kind, Response::Kind::kError);
  EXPECT_EQ(w.answers[1][1], w.answers[0][1]);
  EXPECT_EQ(w.gathers[0], 2);
}

TEST(Controller, ShutdownAskedByOneRankReachesEveryRank) {
  const World w = run({{{}, {}}, {{}, {}}, {{}, {}}}, 1024, {false, true});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(w.answers[r][0].empty());
    EXPECT_EQ(names(w.answers[r][1]), std::vector<std::string>{"(shutdown)"}) << "rank " << r;
  }
}

}  // namespace
}  // namespace horo
