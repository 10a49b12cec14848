// What every shared-memory data path shares: the host's segment and heaps, this rank's place
// among its peers, the steps that order their reads and writes, and the copies, direct reads
// and writes a path moves data with. One per ShmTransport; the paths hold it by reference, so
// a round or a step means the same thing in every path.
//
// A step is a sequence-number barrier in the segment: a rank arrives (publishes that it has
// written, or finished reading, what the round needs), then waits until every peer has. Rounds
// alternate between the two halves of every slot.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/function_ref.h"
#include "transport/shm_capabilities.h"
#include "transport/mpi_transport.h"
#include "transport/shm/heap.h"
#include "transport/shm/policy.h"
#include "transport/shm/segment.h"

namespace horo {

class ShmContext {
 public:
  // Collective over `inner`'s communicator, whose ranks must share this host.
  explicit ShmContext(MpiTransport& inner);
  ShmContext(const ShmContext&) = delete;
  ShmContext& operator=(const ShmContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MpiTransport& inner() { return inner_; }
  ShmSegment& segment() { return segment_; }
  ShmHeap& heap() { return heap_; }
  // heap_'s source of outputs, made once (it may outlive this context).
  const OutputAllocator& allocate_output() const { return allocate_output_; }
  // Rank 0's, so that ranks whose environments differ still take the same steps.
  const ShmThresholds& thresholds() const { return thresholds_; }
  size_t chunk() const { return chunk_; }  // bytes of one half-slot
  std::chrono::microseconds spin() const { return spin_; }
  bool spin_yields() const { return spin_yields_; }

  // Whether a move of `bytes` (a size every rank agrees on) reads or writes peers' buffers
  // directly, from `threshold` (0: never). Never where the kernel refuses cross-memory access.
  bool reads_directly(uint64_t threshold, size_t bytes) const { return moves_directly(threshold, bytes, cross_memory_); }
  bool cross_memory() const { return cross_memory_; }
  // What the policy's choice of path depends on here (outputs_located: asked by HeapPush's step).
  PathConditions path_conditions() const { return {chunk_, heap_.enabled(), cross_memory_, true}; }
  // Whether the policy lets `path` run a `type` collective of `bytes` (shm_path_eligible) here.
  bool path_eligible(ShmPath path, CollectiveType type, size_t bytes) const {
    return shm_path_eligible(path, thresholds_, type, bytes, size_, path_conditions());
  }

  // Rounds alternate between the two halves of every slot: a rank may fill
  // half h again only after a step of the round in between, which every
  // peer reaches after it has finished reading half h.
  void begin_round() {
    if (unawaited_) await_step(std::exchange(unawaited_, 0));
    half_ = static_cast<int>(rounds_++ & 1);
  }
  // This rank has published (or finished reading) what the round needs:
  // announce it, then wait until every peer has said the same.
  void step() {
    const int missing = arrive();
    if (missing < size_) await_step(seq_, missing);
    unawaited_ = 0;  // every rank is past it too
  }
  // step(), with `between` done after this rank has arrived and before it waits for its peers.
  void step_doing(FunctionRef<void()> between) {
    const int missing = arrive();
    between();
    if (missing < size_) await_step(seq_, missing);
    unawaited_ = 0;
  }
  // A collective's last step where this rank needs nothing from its peers (a gather's sender
  // after its push): announce it and go on; the next round waits for it, by when the peers are
  // usually long past. Where ranks outnumber cores a sender that waited here would sleep, and
  // wake late.
  void step_without_waiting() {
    if (arrive() < size_) unawaited_ = seq_;
  }
  // The step after pushes into peers' outputs: every output is whole. A rank that receives
  // nothing (a gather's sender) need not `wait` for it.
  void pushed(bool wait = true) {
    begin_round();
    wait ? step() : step_without_waiting();
  }

  char* slot(int r) { return segment_.data(r, half_); }
  ShmMailbox& mail(int r) { return segment_.mailbox(r, half_); }

  // Copies from this size into a slot stream (0: never).
  size_t stream_bytes_from() const { return stream_bytes_; }
  // Copies a collective's data into a slot that peers read next, with non-temporal stores
  // where the machine wants them (store_probe.h).
  void copy_for_peers(char* to, const void* src, size_t bytes) const;
  // The same for a push into a peer's output (in its heap), one of `pushed` bytes this rank
  // pushes in the call: many cores storing megabytes at once want streamed stores.
  void push_to_output(char* to, const void* src, size_t bytes, size_t pushed) const;
  // A rank's own part of an exchange (allgather, alltoall) into its output.
  void copy_own(char* to, const void* src, size_t bytes) const;

  // Publishes `address` (and a broadcast reader's `bytes_read`) in this rank's mailbox; returns once every rank has.
  void publish_addresses(const void* address, uint64_t bytes_read = 0);
  // Reads a peer's memory; a failure is kept for finish_reads() rather than
  // thrown, so this rank still takes the steps its peers wait for.
  void read_from(int peer, uint64_t remote, void* local, size_t bytes);
  // Writes into a peer's memory (process_vm_writev), the same way.
  void write_to(int peer, uint64_t remote, const void* local, size_t bytes);
  // The step after the reads and writes (owners may touch their buffers again), carrying
  // each rank's outcome: a failed read raises on every rank.
  void finish_reads();

  // One step in which every rank says where `output` lies in its heap (and, with
  // `recv_at`, where each peer's part of it starts). True when every rank's does:
  // output(r) is then rank r's output as mapped here, its `recv_at` in slot(r),
  // and each rank pushes its data into its peers' outputs, then takes pushed().
  // With `input`, each rank's input address is in mail(r).input().
  bool outputs_in_heaps(void* output, size_t bytes, const std::vector<size_t>* recv_at = nullptr,
                        const void* input = nullptr);
  // The same, from the mailboxes of a step just taken (their output_location()).
  bool outputs_located();
  // Where a reduction's `bytes`-byte output lies in this rank's heap, for peers to push their
  // reduced slices into, or ShmHeap::kNowhere: pushes start at allreduce_push_bytes.
  // `wanted`: false for a reduce's non-root, whose output is empty, which is anywhere.
  uint64_t reduced_output_at(const void* output, size_t bytes, bool wanted) const {
    if (!heap_.enabled() || bytes < thresholds_.allreduce_push_bytes) return ShmHeap::kNowhere;
    return heap_.locate(output, wanted ? bytes : 0);
  }
  // Rank r's output, located by one of the above (or by the control step, set_output).
  char* output(int r) const { return outputs_[r]; }
  void set_output(int r, char* at) { outputs_[r] = at; }

  // Where wait_for_peers() and the idle wait see a peer start a cycle: some peer has taken a
  // step this rank has not. Never blocks; any thread.
  bool peers_ahead();
  // ShmCapabilities::wait_for_peers.
  void wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout, bool spin);
  void fail_if_dead(int peer);
  // Point-to-point (the ring, a hierarchical step) runs over MPI, whose messages
  // move only while both ends call into MPI: a rank that waits here pokes it every
  // slice, or a peer still finishing its ring step could wait for this one forever.
  void keep_mpi_moving();

 private:
  // Announces this rank at the next step; returns the first rank not there yet (size_ when
  // none: this rank was the last, and woke the sleepers).
  int arrive();
  // Returns once every rank has arrived at step `seq` (ranks before `from` have).
  void await_step(uint64_t seq, int from = 0);
  void fail_if_a_peer_died();
  // HORO_SHM_STREAM_BYTES=auto: measures at start-up (collective) which stores suit this machine.
  size_t choose_stream_bytes();

  MpiTransport& inner_;
  const int rank_;
  const int size_;
  ShmSegment segment_;
  ShmHeap heap_;
  const OutputAllocator allocate_output_;
  std::vector<char*> outputs_;
  const size_t chunk_;
  ShmThresholds thresholds_;
  size_t stream_bytes_ = 0;        // 0: plain copies into the slots
  size_t stream_pushes_from_ = 0;  // 0: pushes follow stream_bytes_ alone (few cores, or HORO_SHM_STREAM_BYTES given)
  bool cross_memory_ = false;      // every rank may read and write its peers' memory
  std::string read_error_;
  uint64_t failed_access_ = 0;  // ShmMailbox::kReadFailed or kWriteFailed, with read_error_
  const std::chrono::microseconds spin_;
  const bool spin_yields_;
  // Atomic: the background thread reads it (peers_ahead) while a caller may run a cycle.
  std::atomic<uint64_t> seq_{0};
  uint64_t unawaited_ = 0;  // a step this rank left without waiting (step_without_waiting)
  uint64_t rounds_ = 0;
  int half_ = 0;
};

}  // namespace horo
