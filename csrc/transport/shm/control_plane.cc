#include "transport/shm/control_plane.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "common/copy_bytes.h"
#include "common/stream_bytes.h"
#include "transport/peer_watch.h"
#include "transport/shm/layout.h"
#include "transport/shm_capabilities.h"

namespace horo {

void ControlPlane::preload(const void* input, size_t bytes, bool rooted) {
  // Area (cycle % 2) is free: peers read it last two cycles ago, before they joined the
  // control step of the cycle in between, which this rank has passed.
  ++preloads_;
  output_offered_ = false;
  preloaded_output_ = nullptr;
  char* area = ctx_.segment().preload_area(ctx_.rank(), preloads_ & 1);
  bytes = std::min(bytes, preload_capacity());
  if (bytes > ShmCapabilities::kPreloadPieceBytes && preloads_in_pieces()) {
    deferred_input_ = static_cast<const char*>(input);
    deferred_bytes_ = bytes;
    deferred_rooted_ = rooted;
    return;
  }
  // Only a root's input (broadcast, scatter) streams, as every peer reads the root's area; an
  // exchange's preload is small and read by one peer each, where streaming is slower.
  if (rooted) {
    ctx_.copy_for_peers(area, input, bytes);
  } else {
    copy_bytes(area, input, bytes);
  }
  ctx_.segment().state(ctx_.rank()).preloaded[preloads_ & 1].store(preloads_ << 32 | bytes, std::memory_order_release);
}

bool ControlPlane::preload_output(size_t bytes, const std::vector<size_t>& recv_at) {
  // The recv_at offsets take the place of an input in this cycle's area.
  if (!ctx_.heap().enabled() || bytes == 0 || recv_at.size() * sizeof(size_t) > preload_capacity()) return false;
  if (!reserved_output_ || reserved_bytes_ != bytes) {  // an unused one from an earlier cycle is kept
    reserved_output_ = ctx_.allocate_output()(bytes);
    reserved_bytes_ = bytes;
    if (!reserved_output_) return false;  // the heap is full
  }
  std::memcpy(ctx_.segment().preload_area(ctx_.rank(), preloads_ & 1), recv_at.data(), recv_at.size() * sizeof(size_t));
  ctx_.segment().state(ctx_.rank()).output_at[preloads_ & 1].store(ctx_.heap().locate(reserved_output_.get(), bytes),
                                                                   std::memory_order_relaxed);  // arrive() publishes it
  output_offered_ = true;
  return true;
}

std::shared_ptr<char> ControlPlane::take_preloaded_output() {
  if (!output_offered_) return nullptr;
  output_offered_ = false;
  preloaded_output_ = reserved_output_.get();
  return std::move(reserved_output_);
}

bool ControlPlane::output_preloaded(const void* output) {
  // Taken only where the control step showed every rank had located one for this collective.
  // Matched once: the collective it was taken for may free it (a TF op copies its result out)
  // before the next collective of the cycle, whose output the heap may then put at the same
  // address; that one must locate its outputs with a step of its own, as its peers do.
  if (!preloaded_output_ || output != std::exchange(preloaded_output_, nullptr)) return false;
  for (int p = 0; p < ctx_.size(); ++p) {
    const uint64_t at = ctx_.segment().state(p).output_at[preloads_ & 1].load(std::memory_order_relaxed);
    ctx_.set_output(p, ctx_.heap().of(p) + at);
  }
  return true;
}

void ControlPlane::fill_deferred_preload() {
  char* area = ctx_.segment().preload_area(ctx_.rank(), preloads_ & 1);
  std::atomic<uint64_t>& ready = ctx_.segment().state(ctx_.rank()).preloaded[preloads_ & 1];
  const char* input = std::exchange(deferred_input_, nullptr);
  const size_t stream_from = ctx_.stream_bytes_from();
  const bool stream = deferred_rooted_ && stream_from > 0 && deferred_bytes_ >= stream_from;
  for (size_t at = 0; at < deferred_bytes_; at += ShmCapabilities::kPreloadPieceBytes) {
    const size_t n = std::min(ShmCapabilities::kPreloadPieceBytes, deferred_bytes_ - at);
    stream ? stream_bytes(area + at, input + at, n) : copy_bytes(area + at, input + at, n);
    ready.store(preloads_ << 32 | (at + n), std::memory_order_release);
  }
}

void ControlPlane::await_preloaded(int rank, size_t bytes) {
  const std::atomic<uint64_t>& ready = ctx_.segment().state(rank).preloaded[preloads_ & 1];
  // This cycle's input, `bytes` of it at least (a word from an earlier cycle: none of it; the
  // count of cycles wraps at 2^32, hence equal, not at least).
  auto there = [&] {
    const uint64_t word = ready.load(std::memory_order_acquire);
    return word >> 32 == (preloads_ & 0xffffffffu) && (word & 0xffffffffu) >= bytes;
  };
  if (there()) return;
  // The rank is copying (it arrived at the step) and is done within microseconds; one that died
  // or stopped (SIGSTOP, a debugger) is noticed between spins, as a step's wait notices it.
  if (spin_for(there, ctx_.spin(), ctx_.spin_yields())) return;
  WaitDeadline deadline("a peer's input in shared memory");
  while (!there()) {
    ctx_.fail_if_dead(rank);
    ctx_.keep_mpi_moving();
    deadline.poll(std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void ControlPlane::allreduce_bitand(std::vector<uint64_t>& words) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t per_round = ctx_.chunk() / sizeof(uint64_t);
  for (size_t done = 0; done < words.size(); done += per_round) {
    const size_t n = std::min(per_round, words.size() - done);
    ctx_.begin_round();
    copy_bytes(ctx_.slot(rank), words.data() + done, n * sizeof(uint64_t));
    if (deferred_input_) {  // the preload copied in between arriving and waiting
      ctx_.step_doing([this] { fill_deferred_preload(); });
    } else {
      ctx_.step();
    }
    for (int p = 0; p < size; ++p) {
      const uint64_t* theirs = reinterpret_cast<const uint64_t*>(ctx_.slot(p));
      for (size_t i = 0; i < n; ++i) words[done + i] &= theirs[i];
    }
  }
}

std::vector<std::string> ControlPlane::gather_bytes(const std::string& mine, int root) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t chunk = ctx_.chunk();
  std::vector<std::string> out(rank == root ? size : 0);
  std::vector<size_t> lengths(size, 0);
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    if (k == 0) ctx_.mail(rank).length() = mine.size();
    const size_t n = piece(mine.size(), k, chunk);
    if (rank != root && n) copy_bytes(ctx_.slot(rank), mine.data() + k * chunk, n);
    ctx_.step();
    if (k == 0) {
      // Lengths travel in round 0's mailboxes, so everyone knows how many rounds follow.
      for (int p = 0; p < size; ++p) {
        lengths[p] = ctx_.mail(p).length();
        rounds = std::max(rounds, ceil_div(lengths[p], chunk));
      }
      if (rank == root) {
        for (int p = 0; p < size; ++p) out[p].resize(lengths[p]);
        out[root] = mine;
      }
    }
    if (rank != root) continue;
    for (int p = 0; p < size; ++p) {
      const size_t pn = piece(lengths[p], k, chunk);
      if (p != root && pn) copy_bytes(&out[p][k * chunk], ctx_.slot(p), pn);
    }
  }
  return out;
}

void ControlPlane::broadcast_bytes(std::string& data, int root) {
  const int rank = ctx_.rank();
  const size_t chunk = ctx_.chunk();
  size_t length = data.size();
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    const size_t n = piece(length, k, chunk);
    if (rank == root) {
      if (k == 0) ctx_.mail(root).length() = length;
      if (n) copy_bytes(ctx_.slot(root), data.data() + k * chunk, n);
    }
    ctx_.step();
    if (k == 0) {
      length = ctx_.mail(root).length();
      rounds = std::max<size_t>(1, ceil_div(length, chunk));
      if (rank != root) data.resize(length);
    }
    const size_t got = piece(length, k, chunk);
    if (rank != root && got) copy_bytes(&data[k * chunk], ctx_.slot(root), got);
  }
}

}  // namespace horo
