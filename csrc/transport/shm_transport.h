// Collectives among the ranks of one host through one shared segment
// (shm_segment.h), written for shared memory rather than ported from the
// ring: every rank publishes a chunk into its own slot, one step (a
// sequence-number barrier in the segment) later everyone reads what it
// needs straight from its peers' slots. Allreduce is a single-copy
// reduce-scatter (rank r reduces slice r from every peer's chunk) plus an
// all-gather by copy, chunk by chunk so the data stays in cache (the shape
// of DeepSpeed's CPU shm allreduce and Open MPI's coll/xhc). The control
// plane runs through the same slots, so a steady-state cycle sends no MPI
// message, and a small cached collective's inputs ride its control step
// (preload): each rank then computes its output with no step of its own.
// Where every output came from its rank's heap (shm_heap.h), each rank
// writes its data straight into its peers' outputs: allgather, alltoall and
// gather then skip the segment, and allreduce's all-gather skips copying
// out of it. Other large moves (broadcast, scatter, and the rest into
// outputs outside the heaps) skip it where the kernel allows: receivers read
// the senders' buffers directly (cross_memory.h). Either way, one copy
// instead of two.
// Point-to-point (the ring) and split stay on the inner MPI transport.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "transport/shm/cached_reads.h"
#include "transport/mpi_transport.h"
#include "transport/shm/heap.h"
#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace horo {

class ShmTransport : public Transport, public ShmCapabilities {
 public:
  // Collective over `inner`'s communicator, whose ranks must share this host.
  explicit ShmTransport(std::unique_ptr<MpiTransport> inner);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool prefers_native() const override { return true; }
  ShmCapabilities* shm() override { return this; }

  int isend(const void* buf, size_t bytes, int peer) override { return inner_->isend(buf, bytes, peer); }
  int irecv(void* buf, size_t bytes, int peer) override { return inner_->irecv(buf, bytes, peer); }
  void wait(int slot) override { inner_->wait(slot); }
  void wait_all() override { inner_->wait_all(); }
  // Users' point-to-point rides the MPI communicator (Open MPI moves it through shared memory on a host).
  int post_send(const void* buf, size_t bytes, int peer, int tag) override {
    return inner_->post_send(buf, bytes, peer, tag);
  }
  int post_recv(void* buf, size_t bytes, int peer, int tag) override { return inner_->post_recv(buf, bytes, peer, tag); }
  bool test_posted(int id, size_t* received) override { return inner_->test_posted(id, received); }
  int max_tag() const override { return inner_->max_tag(); }

  bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) override {
    return native_allreduce_scaled(input, output, count, dtype, op, 1.0);
  }
  bool native_allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                               double scale) override {
    return reduce_for(input, output, count, dtype, op, scale, kEveryRank);
  }
  bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op) override;
  void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) override;
  void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                 const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) override;
  void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) override;
  bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, int root) override;
  void barrier() override { step(); }
  std::unique_ptr<Transport> split(const std::vector<int>& members) override { return inner_->split(members); }
  OutputAllocator output_allocator() const override { return allocate_output_; }

  size_t preload_capacity() const override { return size_ > 1 ? segment_.preload_bytes() : 0; }
  int64_t preload_bytes(const Request& q, int root_set_rank) const override;
  void preload(const void* input, size_t bytes, bool rooted) override;
  // Cycles alternate between a rank's two areas, as rounds do between halves.
  const char* preloaded(int rank) override { return segment_.preload_area(rank, preloads_ & 1); }
  bool preload_output(size_t bytes, const std::vector<size_t>& recv_at) override;
  std::shared_ptr<char> take_preloaded_output() override;
  // Where ranks outnumber cores, readers waiting on pieces would take the core the writer copies on.
  bool preloads_in_pieces() const override { return !spin_yields_; }
  void await_preloaded(int rank, size_t bytes) override;
  bool moves_rooted_directly(CollectiveType type, size_t bytes) const override;
  void allreduce_bitand(std::vector<uint64_t>& words) override;
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override;
  void broadcast_bytes(std::string& data, int root) override;
  bool wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout,
                      bool spin = true) override;
  void wake_local() override { ring(segment_.state(rank_).idle); }
  bool watches_peers() const override { return true; }
  bool peers_ahead() override;
  void set_caller_cycles(bool on) override { segment_.state(rank_).caller_cycles.store(on ? 1 : 0); }

 private:
  // Allreduce (root: kEveryRank) or reduce to `root`, whose peers then skip the all-gather
  // and need not wait for the last step.
  static constexpr int kEveryRank = -1;
  bool reduce_for(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, double scale, int root);
  // A preload larger than one piece is copied in after this rank's arrival at the control
  // step, a piece at a time, each announced in its state's preloaded[] word: the readers,
  // released by the step, read a piece while this rank copies the next one in, where copying
  // everything in before arriving had them wait for all of it.
  void fill_deferred_preload();
  // reduce_for's path from (rooted_)reduce_single_copy_bytes_: every rank's input and output
  // address in its mailbox (words 1 and 2), from the step just taken; `push`: every output is
  // in its rank's heap.
  void reduce_reading_peers(const char* in, char* out, size_t count, DataType dtype, ReduceOp op, double scale,
                            int root, bool push);
  // mine = own (op) every peer's `n` elements from byte `at` of the buffer in its mailbox word
  // `word`, each read into piece_ (kReadPieceBytes at most) and reduced from there.
  void reduce_with_peers_inputs(char* mine, const char* own, int word, size_t at, size_t n, DataType dtype,
                                ReduceOp op);
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
  // A collective's last step where this rank needs nothing from its peers (a gather's sender
  // after its push): announce it and go on; the next round waits for it, by when the peers
  // are usually long past. With more ranks than cores a sender that waited here slept, and
  // the wake-up came late (np=4 on 2 cores, 1 MiB gather: the senders' calls took 2x the root's).
  void step_without_waiting() {
    if (arrive() < size_) unawaited_ = seq_;
  }
  // Announces this rank at the next step; returns the first rank not there yet (size_ when
  // none: this rank was the last, and woke the sleepers).
  int arrive();
  // Returns once every rank has arrived at step `seq` (ranks before `from` have).
  void await_step(uint64_t seq, int from = 0);
  void fail_if_a_peer_died();
  void fail_if_dead(int peer);
  // Point-to-point (the ring, a hierarchical step) runs over MPI, whose messages
  // move only while both ends call into MPI: a rank that waits here pokes it every
  // slice, or a peer still finishing its ring step could wait for this one forever.
  void keep_mpi_moving();
  char* slot(int r) { return segment_.data(r, half_); }
  // Copies a collective's data into a slot that peers read next, with non-temporal
  // stores from stream_bytes_ up (common/stream_bytes.h) where the machine wants them
  // (store_probe.h). Also a push into a peer's output, which its owner reads next.
  void copy_for_peers(char* to, const void* src, size_t bytes) const;
  // The same for a push into a peer's output (in its heap), one of `pushed` bytes this
  // rank pushes in the call: streamed, too, where those come to stream_pushes_from_.
  void push_to_output(char* to, const void* src, size_t bytes, size_t pushed) const;
  // HORO_SHM_STREAM_BYTES=auto: measures at start-up (collective) which stores suit this machine.
  size_t choose_stream_bytes();
  // A rank's own part of an exchange (allgather, alltoall) into its output.
  static void copy_own(char* to, const void* src, size_t bytes);
  uint64_t* mail(int r) { return segment_.mailbox(r, half_).words; }
  // Piece of `total` bytes that round k carries, `per_round` bytes a round.
  static size_t piece(size_t total, size_t k, size_t per_round);
  // Rank r's elements [lo, hi) of `count` in a reduce-scatter by slices (allreduce, reduce).
  std::pair<size_t, size_t> slice_of(int r, size_t count, size_t esize) const;
  // Ranks this rank's reduced slice goes to: every peer, or a reduce's root.
  int push_targets(int root) const { return root == kEveryRank ? size_ - 1 : 1; }
  // Whether a gather or scatter of `total` bytes writes straight into the root's (receivers') outputs
  // where they lie in the heaps.
  bool pushes_rooted(size_t total) const;
  // Whether a gather or scatter of `total` bytes into the heaps has the idle side read a share.
  bool shares_rooted_move(size_t total) const;
  // Bytes per round of a move (broadcast, allgather, gather, scatter) whose largest part is `largest`.
  size_t move_piece(size_t largest) const;
  // Whether a move of `bytes` (a size every rank agrees on) reads peers' buffers directly, from
  // `threshold` (0: never). Rooted moves (gather, scatter: single_copy_bytes_; broadcast: its own)
  // compare their whole size; exchanges (allgather, alltoall) the bytes read from one peer, and
  // from a smaller size: through the segment the root's copy in overlaps the readers' copies
  // out, while in an exchange every rank copies in and out, so reading directly halves each rank's work.
  static bool reads_directly(size_t threshold, size_t bytes) { return threshold > 0 && bytes >= threshold; }
  // Publishes `address` (mail word 0, and `extra`: word 1) in this rank's mailbox; returns once every rank has.
  void publish_addresses(const void* address, uint64_t extra = 0);
  // One step in which every rank says where `output` lies in its heap (and, with
  // `recv_at`, where each peer's part of it starts). True when every rank's does:
  // outputs_[r] is then rank r's output as mapped here, its `recv_at` in slot(r),
  // and each rank pushes its data into its peers' outputs, then takes pushed().
  // With `input`, each rank's input address is in mail(r)[1].
  bool outputs_in_heaps(void* output, size_t bytes, const std::vector<size_t>* recv_at = nullptr,
                        const void* input = nullptr);
  // The same, from the mailboxes of a step just taken (mail word 0: ShmHeap::locate()).
  bool outputs_located();
  // Whether `output` is the one this cycle's control step located (preload_output) on every rank:
  // outputs_[r] is then rank r's, and where it keeps this rank's rows is preloaded(r)'s recv_at.
  bool output_preloaded(const void* output);
  // The step after the pushes: every output is whole. A rank that receives nothing (a
  // gather's sender) need not `wait` for it: step_without_waiting().
  void pushed(bool wait = true) {
    begin_round();
    wait ? step() : step_without_waiting();
  }
  // Reads a peer's memory; a failure is kept for finish_reads() rather than
  // thrown, so this rank still takes the steps its peers wait for.
  void read_from(int peer, uint64_t remote, void* local, size_t bytes);
  // Writes into a peer's memory (process_vm_writev), the same way.
  void write_to(int peer, uint64_t remote, const void* local, size_t bytes);
  // The step after the reads and writes (owners may touch their buffers again), carrying
  // each rank's outcome: a failed read raises on every rank.
  void finish_reads();

  std::unique_ptr<MpiTransport> inner_;
  int rank_ = 0;
  int size_ = 1;
  ShmSegment segment_;
  ShmHeap heap_;
  const OutputAllocator allocate_output_;  // heap_'s, made once
  std::vector<char*> outputs_;  // outputs_in_heaps()
  size_t chunk_ = 0;        // bytes of one half-slot
  ShmThresholds thresholds_;  // rank 0's (shm_policy.h); the members below are read from it
  size_t small_bytes_ = 0;  // allreduce at or below: one step, every rank reduces everything
  size_t stream_bytes_ = 0;       // 0: plain copies into the slots
  size_t stream_pushes_from_ = 0;  // 0: pushes follow stream_bytes_ alone (few cores, or HORO_SHM_STREAM_BYTES given)
  size_t single_copy_bytes_ = 0;  // 0: cross-memory reads unavailable or turned off
  size_t exchange_single_copy_bytes_ = 0;
  size_t broadcast_single_copy_bytes_ = 0;
  size_t rooted_share_bytes_ = 0;  // gather/scatter into the heaps: the idle side reads a share
  size_t allreduce_push_bytes_ = 0;  // allreduce into outputs in the heaps from this size: pushes
  size_t reduce_single_copy_bytes_ = 0;  // reduce_reading_peers() from this size (0: never)
  size_t rooted_reduce_single_copy_bytes_ = 0;  // the same for a reduce to one root
  size_t reducescatter_single_copy_bytes_ = 0;  // ... and for a reducescatter
  std::string read_error_;
  // A broadcast's receiver whose last read of the root's buffer found its lines cached reads the
  // whole of it the next time (broadcast()); which read that was, and what it found.
  struct RootRead {
    const void* buffer = nullptr;
    size_t bytes = 0;
    int root = -1;
    bool cached = false;
    bool same(const RootRead& o) const { return buffer == o.buffer && bytes == o.bytes && root == o.root; }
  } last_root_read_;
  CachedReads cached_reads_;
  std::vector<char> piece_;  // reduce_with_peers_inputs(): one peer's part of a piece, read here
  std::vector<char> rows_;   // an in-place reducescatter's result, until its peers' reads are done
  std::chrono::microseconds spin_{0};
  bool spin_yields_ = true;
  // Atomic: the background thread reads it (peers_ahead) while a caller may run a cycle.
  std::atomic<uint64_t> seq_{0};
  uint64_t unawaited_ = 0;  // a step this rank left without waiting (step_without_waiting)
  uint64_t rounds_ = 0;
  uint64_t preloads_ = 0;  // cycles: preload() calls
  const char* deferred_input_ = nullptr;  // preload(): an input copied in by fill_deferred_preload()
  size_t deferred_bytes_ = 0;
  bool deferred_rooted_ = false;
  // preload_output(): memory laid out for this cycle's exchange, kept for the next where unused.
  std::shared_ptr<char> reserved_output_;
  size_t reserved_bytes_ = 0;
  bool output_offered_ = false;  // this cycle's control step says where reserved_output_ is
  const char* preloaded_output_ = nullptr;  // taken this cycle (take_preloaded_output), until used
  int half_ = 0;
};

}  // namespace horo
