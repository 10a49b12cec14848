#include "transport/peer_watch.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "transport/mpi_transport.h"

namespace horo {

namespace {

using Clock = std::chrono::steady_clock;

// Receives are re-posted this often at most (a wait polls the watch no faster).
constexpr auto kServiceEvery = std::chrono::milliseconds(200);
constexpr int kHostChars = 64;

struct Watch {
  std::mutex mu;
  MPI_Comm comm = MPI_COMM_NULL;  // pings only: never matches a collective's messages
  double timeout_s = 0;
  int rank = 0, size = 1;
  std::vector<std::string> hosts;       // by world rank
  std::vector<MPI_Request> answers;     // a posted receive per peer: a ping matches it at once
  std::vector<char> answer_bytes;
  std::vector<MPI_Request> pings;       // a synchronous send per peer, MPI_REQUEST_NULL when none
  char ping_byte = 1;
  std::atomic<Clock::rep> last_service{0};  // read unlocked by every wait
};

Watch g_watch;
std::atomic<bool> g_failed{false};

// Peers that have answered their ping get a new receive posted, so the next round finds one.
void repost_answered(Watch& w) {
  for (int p = 0; p < w.size; ++p) {
    if (p == w.rank) continue;
    int done = 0;
    MPI_Test(&w.answers[p], &done, MPI_STATUS_IGNORE);
    if (done) MPI_Irecv(&w.answer_bytes[p], 1, MPI_BYTE, p, 0, w.comm, &w.answers[p]);
  }
}

void ping_everyone(Watch& w) {
  for (int p = 0; p < w.size; ++p) {
    // A ping still unanswered from an earlier wait stays the one that counts.
    if (p == w.rank || w.pings[p] != MPI_REQUEST_NULL) continue;
    MPI_Issend(&w.ping_byte, 1, MPI_BYTE, p, 0, w.comm, &w.pings[p]);
  }
}

std::vector<int> unanswered(Watch& w) {
  std::vector<int> out;
  for (int p = 0; p < w.size; ++p) {
    if (p == w.rank) continue;
    int done = 1;
    if (w.pings[p] != MPI_REQUEST_NULL) MPI_Test(&w.pings[p], &done, MPI_STATUS_IGNORE);
    if (!done) out.push_back(p);
  }
  return out;
}

// "rank(s) 4, 5 on host h3; rank 6 on host h4"
std::string name_peers(const Watch& w, const std::vector<int>& peers) {
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (int p : peers) {
    if (!by_host.count(w.hosts[p])) order.push_back(w.hosts[p]);
    by_host[w.hosts[p]].push_back(p);
  }
  std::ostringstream out;
  for (size_t h = 0; h < order.size(); ++h) {
    const auto& ranks = by_host[order[h]];
    out << (h ? "; " : "") << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
    out << " on host " << order[h];
  }
  return out.str();
}

// When the job ends after a lost peer: MPI_Abort makes the launcher contact every
// host's daemon, and it then waits for an unreachable one as long as TCP retries
// (many minutes). So the ranks first leave the launcher time to notice the lost host
// itself (horo-run sets its keepalive to do that within 1.5-2.5 timeouts, job.py)
// and end the job then; ranks that are merely stopped it never notices: abort after that.
std::atomic<Clock::rep> g_abort_at{0};

std::atomic<bool> g_aborting{false};

[[noreturn]] void abort_when_due() {
  std::this_thread::sleep_until(Clock::time_point(Clock::duration(g_abort_at.load())));
  // The exiting main thread and the abort thread both come here at the same instant;
  // MPI_Abort is not thread-safe (two at once crashed in Open MPI's help-text parser and
  // left the launcher waiting), so the second one waits for the first to end the process.
  if (g_aborting.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  // Not HORO_LOG: its Python sink takes the GIL, which the exiting main thread may hold here.
  std::fprintf(stderr, "horo: ending the job with MPI_Abort: peers unreachable (HORO_PEER_TIMEOUT_SECONDS)\n");
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

}  // namespace

void peer_watch_start(MPI_Comm world, double timeout_s) {
  Watch& w = g_watch;
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.comm != MPI_COMM_NULL) return;  // one per process: horo.init() after shutdown keeps it
  w.timeout_s = timeout_s;
  mpi_check(MPI_Comm_dup(world, &w.comm), "MPI_Comm_dup");
  MPI_Comm_rank(w.comm, &w.rank);
  MPI_Comm_size(w.comm, &w.size);
  char mine[kHostChars] = {};
  gethostname(mine, kHostChars - 1);
  std::vector<char> all(static_cast<size_t>(kHostChars) * w.size);
  mpi_check(MPI_Allgather(mine, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, w.comm), "MPI_Allgather");
  for (int p = 0; p < w.size; ++p) w.hosts.emplace_back(&all[static_cast<size_t>(p) * kHostChars]);
  w.answers.assign(w.size, MPI_REQUEST_NULL);
  w.answer_bytes.assign(w.size, 0);
  w.pings.assign(w.size, MPI_REQUEST_NULL);
  for (int p = 0; p < w.size; ++p) {
    if (p != w.rank) MPI_Irecv(&w.answer_bytes[p], 1, MPI_BYTE, p, 0, w.comm, &w.answers[p]);
  }
  w.last_service = Clock::now().time_since_epoch().count();
}

bool peer_watch_failed() { return g_failed.load(); }

void peer_watch_end_job() { abort_when_due(); }

WaitDeadline::WaitDeadline(const char* what) : what_(what), since_(Clock::now()) {
  const Watch& w = g_watch;
  // The first check comes at once if answered receives are due to be re-posted (short waits
  // must do that too), else with the next service.
  const Clock::time_point serviced{Clock::duration(w.last_service.load())};
  next_ = w.comm == MPI_COMM_NULL ? Clock::time_point::max() : std::max(since_, serviced + kServiceEvery);
}

void WaitDeadline::check(Clock::time_point now) {
  Watch& w = g_watch;
  std::unique_lock<std::mutex> lock(w.mu, std::try_to_lock);
  if (!lock.owns_lock() || w.comm == MPI_COMM_NULL) {
    next_ = now + kServiceEvery;
    return;
  }
  if (now - Clock::time_point(Clock::duration(w.last_service.load())) >= kServiceEvery) {
    repost_answered(w);
    w.last_service = now.time_since_epoch().count();
  }
  next_ = now + kServiceEvery;
  if (w.timeout_s <= 0) return;
  const double waited = std::chrono::duration<double>(now - since_).count();
  if (!pinged_ && waited >= w.timeout_s / 2) {
    ping_everyone(w);
    pinged_ = true;
  }
  if (!pinged_ || waited < w.timeout_s) return;
  const std::vector<int> lost = unanswered(w);
  if (lost.empty()) {  // everyone is alive: a slow wait, not a lost peer
    since_ = now;
    pinged_ = false;
    return;
  }
  std::ostringstream why;
  why << "no answer from " << name_peers(w, lost) << " within " << w.timeout_s
      << " s (HORO_PEER_TIMEOUT_SECONDS) while rank " << w.rank << " on host " << w.hosts[w.rank] << " waited in "
      << what_ << ": their host is unreachable or they stopped; the job cannot go on";
  if (!g_failed.exchange(true)) {
    g_abort_at = (now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(2 * w.timeout_s)))
                     .time_since_epoch()
                     .count();
    // Also when the main thread never exits (blocked in the user's own MPI call).
    std::thread(abort_when_due).detach();
  }
  throw PeerUnreachable(why.str());
}

}  // namespace horo
