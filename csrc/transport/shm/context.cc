#include "transport/shm/context.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/copy_bytes.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/stream_bytes.h"
#include "transport/peer_watch.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/layout.h"
#include "transport/shm/store_probe.h"

namespace horo {

ShmContext::ShmContext(MpiTransport& inner)
    : inner_(inner),
      rank_(inner.rank()),
      size_(inner.size()),
      // A slot holds one piece for every rank (alltoall, scatter): at least a cache line each.
      segment_(inner.comm(), std::max(inner.settings().shm_chunk_bytes, kLine * inner.size()),
               inner.settings().shm.preload_bytes),
      heap_(inner.comm(), inner.size() > 1 ? inner.settings().shm_heap_bytes : 0),
      allocate_output_(heap_.allocator()),
      outputs_(inner.size(), nullptr),
      chunk_(segment_.chunk_bytes()),
      spin_(inner.settings().spin_microseconds),
      spin_yields_(inner.settings().spin_yields) {
  // The thresholds that decide how many steps a collective takes come from rank 0, as the
  // segment's sizes do: ranks whose environments differ must still take the same steps.
  // (Rank 0's choice of stores too, which changes no step, so that every rank probes or none.)
  thresholds_ = inner_.settings().shm;
  static_assert(sizeof(ShmThresholds) % sizeof(uint64_t) == 0, "ShmThresholds travels as 64-bit words");
  MPI_Bcast(&thresholds_, sizeof(ShmThresholds) / sizeof(uint64_t), MPI_UINT64_T, 0, inner_.comm());
  const bool probe = thresholds_.stream_bytes == ShmThresholds::kProbe;
  stream_bytes_ = probe ? choose_stream_bytes() : thresholds_.stream_bytes;
  stream_pushes_from_ = push_stream_bytes(thresholds_, size_, std::thread::hardware_concurrency());
  cross_memory_ = thresholds_.reads_directly() && cross_memory_works(inner_.comm());
}

size_t ShmContext::choose_stream_bytes() {
  if (size_ == 1) return 0;  // nobody reads this rank's copies
  const size_t bytes = std::min<size_t>(chunk_, size_t(1) << 20);
  const StoreProbe probe = probe_stores(inner_.comm(), slot(0), bytes);
  uint64_t stream_from = probe.stream() ? thresholds_.probed_stream_bytes : 0;
  MPI_Bcast(&stream_from, 1, MPI_UINT64_T, 0, inner_.comm());
  if (rank_ == 0) {
    HORO_LOG(kLogInfo, "shared-memory stores: a " << bytes << "-byte copy into lines a peer has just read took "
                                                 << probe.plain_us << " us plain, " << probe.stream_us
                                                 << " us streamed: "
                                                 << (stream_from ? "streaming from " + std::to_string(stream_from) + " bytes"
                                                                 : std::string("plain copies")));
  }
  return stream_from;
}

void ShmContext::copy_for_peers(char* to, const void* src, size_t bytes) const {
  if (stream_bytes_ > 0 && bytes >= stream_bytes_) {
    stream_bytes(to, src, bytes);
  } else {
    copy_bytes(to, src, bytes);
  }
}

void ShmContext::push_to_output(char* to, const void* src, size_t bytes, size_t pushed) const {
  // Where the probe chose plain stores (a slot's lines, just read by one peer), a call whose ranks
  // push megabytes each at once still wants streamed ones: many cores storing at once saturate memory.
  if (stream_pushes_from_ > 0 && pushed >= stream_pushes_from_) {
    stream_bytes(to, src, bytes);
  } else {
    copy_for_peers(to, src, bytes);
  }
}

void ShmContext::copy_own(char* to, const void* src, size_t bytes) const {
  // Streamed past the L2 cache's size, which a plain copy would only evict itself from (below it,
  // streaming is slower).
  if (bytes >= thresholds_.own_stream_bytes) {
    stream_bytes(to, src, bytes);
  } else {
    copy_bytes(to, src, bytes);
  }
}

void ShmContext::publish_addresses(const void* address, uint64_t bytes_read) {
  begin_round();
  mail(rank_).address() = reinterpret_cast<uint64_t>(address);
  mail(rank_).bytes_read() = bytes_read;
  step();
}

void ShmContext::read_from(int peer, uint64_t remote, void* local, size_t bytes) {
  if (!bytes || !read_error_.empty()) return;
  try {
    read_peer(segment_.state(peer).pid.load(), remote, local, bytes, peer);
  } catch (const Error& e) {
    read_error_ = e.what();
    failed_access_ = ShmMailbox::kReadFailed;
  }
}

void ShmContext::write_to(int peer, uint64_t remote, const void* local, size_t bytes) {
  if (!bytes || !read_error_.empty()) return;
  try {
    write_peer(segment_.state(peer).pid.load(), remote, local, bytes, peer);
  } catch (const Error& e) {
    read_error_ = e.what();
    failed_access_ = ShmMailbox::kWriteFailed;
  }
}

void ShmContext::finish_reads() {
  begin_round();
  mail(rank_).access_failed() = failed_access_;
  step();
  std::string error;
  std::swap(error, read_error_);
  failed_access_ = 0;
  for (int p = 0; p < size_ && error.empty(); ++p) {
    if (mail(p).access_failed() == ShmMailbox::kReadFailed) {
      error = "rank " + std::to_string(p) + " could not read a peer's buffer (process_vm_readv)";
    } else if (mail(p).access_failed() == ShmMailbox::kWriteFailed) {
      error = "rank " + std::to_string(p) + " could not write a peer's buffer (process_vm_writev)";
    }
  }
  if (!error.empty()) throw Error(error);
}

bool ShmContext::outputs_in_heaps(void* output, size_t bytes, const std::vector<size_t>* recv_at,
                                  const void* input) {
  begin_round();
  mail(rank_).output_location() = heap_.locate(output, bytes);
  mail(rank_).input() = reinterpret_cast<uint64_t>(input);
  if (recv_at) std::memcpy(slot(rank_), recv_at->data(), recv_at->size() * sizeof(size_t));
  step();
  return outputs_located();
}

bool ShmContext::outputs_located() {
  for (int p = 0; p < size_; ++p) {
    if (mail(p).output_location() == ShmHeap::kNowhere) return false;
  }
  for (int p = 0; p < size_; ++p) outputs_[p] = heap_.of(p) + mail(p).output_location();
  return true;
}

int ShmContext::arrive() {
  const uint64_t seq = ++seq_;
  segment_.state(rank_).seq.store(seq, std::memory_order_seq_cst);
  // Only the last to arrive wakes the sleepers: the others would wake them to find the step
  // still short (with more ranks than cores, a wasted switch onto a core a late rank needs).
  // Stores and loads are seq_cst, so the rank whose store comes last sees every other one.
  for (int p = 0; p < size_; ++p) {
    if (segment_.state(p).seq.load(std::memory_order_seq_cst) < seq) return p;
  }
  ring(segment_.bell());
  return size_;
}

void ShmContext::await_step(uint64_t seq, int from) {
  int next = from;  // peers before it have arrived: not polled again
  auto everyone_here = [&] {
    for (; next < size_; ++next) {
      if (segment_.state(next).seq.load(std::memory_order_seq_cst) < seq) return false;
    }
    return true;
  };
  if (everyone_here()) return;
  // A local peer may be held up by the network (the cross-host step of a hierarchical
  // collective): the deadline finds out whether its host, or another, is still there.
  if (spin_for(everyone_here, spin_, spin_yields_)) return;
  // A peer whose caller runs its cycles joins by itself; any other may sleep
  // idle and should hear that a cycle began. Not before the spin: a peer's
  // caller usually comes within it, and a woken background thread would take
  // the core a rank's caller runs on. (A peer whose caller stops after this
  // load finds the cycle with its next tensor, or in its idle wait's next look.)
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && segment_.state(p).caller_cycles.load(std::memory_order_seq_cst) == 0) {
      ring(segment_.state(p).idle);
    }
  }
  WaitDeadline deadline("a shared-memory step");
  wait_until(segment_.bell(), everyone_here, std::chrono::microseconds(0), std::chrono::milliseconds(100), [&] {
    keep_mpi_moving();
    fail_if_a_peer_died();
    deadline.poll(std::chrono::steady_clock::now());
  });
}

bool ShmContext::peers_ahead() {
  for (int p = 0; p < size_; ++p) {
    if (segment_.state(p).seq.load(std::memory_order_seq_cst) > seq_) return true;
  }
  return false;
}

void ShmContext::wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout, bool spin) {
  auto ready = [&] { return local_work() || peers_ahead(); };
  // Calls often come back to back (a training step's gradients, a latency loop):
  // a short spin catches the next one without a futex sleep and wake-up.
  if (spin_for(ready, spin ? spin_ : std::chrono::microseconds(0), spin_yields_)) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Doorbell& bell = segment_.state(rank_).idle;
  while (!ready()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    // Same protocol as wait_until: register, re-test, sleep on the epoch read before the test.
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t epoch = bell.epoch.load(std::memory_order_seq_cst);
    if (!ready()) futex_wait_shared(&bell.epoch, epoch, std::min(left, std::chrono::microseconds(100000)));
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    keep_mpi_moving();
  }
}

void ShmContext::keep_mpi_moving() {
  int arrived = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, inner_.comm(), &arrived, MPI_STATUS_IGNORE);
}

void ShmContext::fail_if_a_peer_died() {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && segment_.state(p).seq.load() < seq_) fail_if_dead(p);
  }
}

void ShmContext::fail_if_dead(int peer) {
  const pid_t pid = segment_.state(peer).pid.load();
  if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
    throw Error("rank " + std::to_string(peer) + " of this process set (pid " + std::to_string(pid) +
                ") exited while rank " + std::to_string(rank_) + " waited for it in shared memory");
  }
}

}  // namespace horo
