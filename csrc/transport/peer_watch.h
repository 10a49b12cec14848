// A deadline on every wait for the network, so a rank never waits forever in
// TCP for a peer whose host lost its link or whose process stopped.
//
// MPI itself never gives up on a peer (Open MPI's TCP path retransmits for
// minutes and then may still wait), so each wait on MPI requests (the MPI
// transport's polite wait) asks the watch, while it polls, whether it has
// waited too long. After half of HORO_PEER_TIMEOUT_SECONDS without the wait
// completing, the watch pings every other rank on a communicator of its own
// (a synchronous send, answered by the MPI library of the peer as soon as it
// polls, whatever that peer is doing). At the full timeout, peers that have
// not answered are the unreachable ones: the wait throws PeerUnreachable
// naming them and their hosts. If every peer answered, they are alive and just
// slow (a long collective), so the wait goes on and the clock restarts.
//
// After that error MPI cannot be used again (no fault tolerance in MPI), so the
// job ends: the launcher notices a lost host itself (horo-run tunes its keepalive
// for that) and ends the job; otherwise each rank calls MPI_Abort two timeouts
// after the error (at exit, instead of MPI_Finalize, which would wait for the
// unreachable ranks, or from a thread of its own if the process does not exit).
#pragma once

#include <mpi.h>

#include <chrono>

#include "common/error.h"

namespace horo {

// Collective over `world` (duplicated for the pings): gathers every rank's
// host name and posts the receives that answer pings. timeout_s <= 0: waits
// have no deadline.
void peer_watch_start(MPI_Comm world, double timeout_s);

// True once a wait has thrown PeerUnreachable in this process.
bool peer_watch_failed();

// After PeerUnreachable: blocks until the abort is due, then MPI_Abort.
[[noreturn]] void peer_watch_end_job();

// One wait's deadline. Construct at the start of a wait, call poll() between
// tests of its requests; poll() throws PeerUnreachable (common/error.h). `what` names the wait.
class WaitDeadline {
 public:
  explicit WaitDeadline(const char* what);
  void poll(std::chrono::steady_clock::time_point now) {
    if (now >= next_) check(now);
  }

 private:
  void check(std::chrono::steady_clock::time_point now);

  const char* what_;
  std::chrono::steady_clock::time_point since_;  // the wait's start, or the last round every peer answered
  std::chrono::steady_clock::time_point next_;   // when check() has something to do
  bool pinged_ = false;
};

}  // namespace horo
