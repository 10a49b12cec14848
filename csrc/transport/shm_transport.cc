#include "transport/shm_transport.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/copy_bytes.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/stream_bytes.h"
#include "reduce/reduce_kernels.h"
#include "transport/shm/cross_memory.h"
#include "transport/peer_watch.h"
#include "transport/shm/store_probe.h"

namespace horo {

namespace {

constexpr size_t kLine = 64;
// A gather or scatter from this size writes straight into the root's (receivers') outputs where they
// lie in the heaps; a smaller one takes one step through the segment rather than two.
constexpr size_t kPushRootedFrom = 64 * 1024;
// Where streaming stores win (store_probe.h), copies from this size use them; below it a copy
// is a few lines, which a plain store fetches quickly enough.
constexpr size_t kStreamPiecesFrom = 16 * 1024;
// Stores of more than an L2 cache's worth in one call only evict their own lines: a rank's own part
// of an exchange (copy_own) streams from this size, and so do its pushes into its peers' outputs
// where many cores store at once (a plain store fetches its line first: twice the memory traffic).
constexpr size_t kStreamBeyondL2 = size_t(2) << 20;
constexpr unsigned kManyCoresStoring = 8;
// A broadcast reads the root's buffer directly only where few ranks read it at once: many readers
// pinning the same pages of the root's lose to its one copy in (MEASUREMENTS.md, "Shared-memory data paths").
constexpr int kMostRanksReadingOneRoot = 4;
// A broadcast's reader that finds the root's lines in its own cache reads all of them itself up to
// this size; beyond it the root's share of the copying wins even so.
constexpr size_t kMostBytesReadWhole = 128 * 1024;
// What a rank reads of one peer at a time where it reduces their inputs directly: the piece stays
// in L2 for the reduction.
constexpr size_t kReadPieceBytes = 128 * 1024;

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
size_t round_down(size_t n, size_t to) { return n / to * to; }

std::vector<size_t> prefix_offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

// out = own (op) other, where `out` is `own` in place: reduce_to's buffers may not overlap.
void reduce_own_with(DataType dtype, ReduceOp op, char* out, const char* own, const char* other, size_t count) {
  if (out == own) {
    reduce_into(dtype, op, out, other, count);
  } else {
    reduce_to(dtype, op, out, own, other, count);
  }
}

}  // namespace

ShmTransport::ShmTransport(std::unique_ptr<MpiTransport> inner)
    : inner_(std::move(inner)),
      rank_(inner_->rank()),
      size_(inner_->size()),
      // A slot holds one piece for every rank (alltoall, scatter): at least a cache line each.
      segment_(inner_->comm(), std::max(inner_->settings().shm_chunk_bytes, kLine * inner_->size()),
               inner_->settings().shm.preload_bytes),
      heap_(inner_->comm(), inner_->size() > 1 ? inner_->settings().shm_heap_bytes : 0),
      allocate_output_(heap_.allocator()),
      outputs_(inner_->size(), nullptr),
      chunk_(segment_.chunk_bytes()),
      spin_(inner_->settings().spin_microseconds),
      spin_yields_(inner_->settings().spin_yields) {
  // The thresholds that decide how many steps a collective takes come from rank 0, as the
  // segment's sizes do: ranks whose environments differ must still take the same steps.
  // (Rank 0's choice of stores too, which changes no step, so that every rank probes or none.)
  thresholds_ = inner_->settings().shm;
  static_assert(sizeof(ShmThresholds) % sizeof(uint64_t) == 0, "ShmThresholds travels as 64-bit words");
  MPI_Bcast(&thresholds_, sizeof(ShmThresholds) / sizeof(uint64_t), MPI_UINT64_T, 0, inner_->comm());
  const ShmThresholds& th = thresholds_;
  small_bytes_ = std::min<size_t>(th.small_bytes, segment_.chunk_bytes());
  allreduce_push_bytes_ = th.allreduce_push_bytes;
  const bool probe = th.stream_bytes == ShmThresholds::kProbe;
  stream_bytes_ = probe ? choose_stream_bytes() : th.stream_bytes;
  const unsigned storing = std::min<unsigned>(size_, std::max(1u, std::thread::hardware_concurrency()));
  stream_pushes_from_ = probe && storing >= kManyCoresStoring ? kStreamBeyondL2 : 0;
  if (th.reads_directly() && cross_memory_works(inner_->comm())) {
    single_copy_bytes_ = th.single_copy_bytes;
    exchange_single_copy_bytes_ = th.exchange_single_copy_bytes;
    broadcast_single_copy_bytes_ = th.broadcast_single_copy_bytes;
    reduce_single_copy_bytes_ = th.reduce_single_copy_bytes;
    rooted_reduce_single_copy_bytes_ = th.rooted_reduce_single_copy_bytes;
    rooted_share_bytes_ = th.rooted_share_bytes;
    reducescatter_single_copy_bytes_ = th.reducescatter_single_copy_bytes;
  }
}

int64_t ShmTransport::preload_bytes(const Request& q, int root_set_rank) const {
  return horo::preload_bytes(thresholds_, inner_->settings().tunables, q, rank_, root_set_rank,
                             size_ == 2 && preloads_in_pieces());
}

size_t ShmTransport::choose_stream_bytes() {
  if (size_ == 1) return 0;  // nobody reads this rank's copies
  const size_t bytes = std::min<size_t>(chunk_, size_t(1) << 20);
  const StoreProbe probe = probe_stores(inner_->comm(), slot(0), bytes);
  uint64_t stream_from = probe.stream() ? kStreamPiecesFrom : 0;
  MPI_Bcast(&stream_from, 1, MPI_UINT64_T, 0, inner_->comm());
  if (rank_ == 0) {
    HORO_LOG(kLogInfo, "shared-memory stores: a " << bytes << "-byte copy into lines a peer has just read took "
                                                 << probe.plain_us << " us plain, " << probe.stream_us
                                                 << " us streamed: "
                                                 << (stream_from ? "streaming from " + std::to_string(stream_from) + " bytes"
                                                                 : std::string("plain copies")));
  }
  return stream_from;
}

void ShmTransport::publish_addresses(const void* address, uint64_t extra) {
  begin_round();
  mail(rank_)[0] = reinterpret_cast<uint64_t>(address);
  mail(rank_)[1] = extra;
  step();
}

bool ShmTransport::outputs_in_heaps(void* output, size_t bytes, const std::vector<size_t>* recv_at,
                                    const void* input) {
  begin_round();
  mail(rank_)[0] = heap_.locate(output, bytes);
  mail(rank_)[1] = reinterpret_cast<uint64_t>(input);
  if (recv_at) std::memcpy(slot(rank_), recv_at->data(), recv_at->size() * sizeof(size_t));
  step();
  return outputs_located();
}

bool ShmTransport::outputs_located() {
  for (int p = 0; p < size_; ++p) {
    if (mail(p)[0] == ShmHeap::kNowhere) return false;
  }
  for (int p = 0; p < size_; ++p) outputs_[p] = heap_.of(p) + mail(p)[0];
  return true;
}

void ShmTransport::copy_for_peers(char* to, const void* src, size_t bytes) const {
  if (stream_bytes_ > 0 && bytes >= stream_bytes_) {
    stream_bytes(to, src, bytes);
  } else {
    copy_bytes(to, src, bytes);
  }
}

void ShmTransport::push_to_output(char* to, const void* src, size_t bytes, size_t pushed) const {
  // Where the probe chose plain stores (a slot's lines, just read by one peer), a call whose ranks
  // push megabytes each at once still wants streamed ones: many cores storing at once saturate memory.
  if (stream_pushes_from_ > 0 && pushed >= stream_pushes_from_) {
    stream_bytes(to, src, bytes);
  } else {
    copy_for_peers(to, src, bytes);
  }
}

void ShmTransport::copy_own(char* to, const void* src, size_t bytes) {
  // Streamed past the L2 cache's size, which a plain copy would only evict itself from (below it,
  // streaming is slower).
  if (bytes >= kStreamBeyondL2) {
    stream_bytes(to, src, bytes);
  } else {
    copy_bytes(to, src, bytes);
  }
}

void ShmTransport::read_from(int peer, uint64_t remote, void* local, size_t bytes) {
  if (!bytes || !read_error_.empty()) return;
  try {
    read_peer(segment_.state(peer).pid.load(), remote, local, bytes, peer);
  } catch (const Error& e) {
    read_error_ = e.what();
  }
}

void ShmTransport::write_to(int peer, uint64_t remote, const void* local, size_t bytes) {
  if (!bytes || !read_error_.empty()) return;
  try {
    write_peer(segment_.state(peer).pid.load(), remote, local, bytes, peer);
  } catch (const Error& e) {
    read_error_ = e.what();
  }
}

void ShmTransport::finish_reads() {
  begin_round();
  mail(rank_)[3] = read_error_.empty() ? 0 : 1;
  step();
  std::string error;
  std::swap(error, read_error_);
  for (int p = 0; p < size_ && error.empty(); ++p) {
    if (mail(p)[3]) error = "rank " + std::to_string(p) + " could not read a peer's buffer (process_vm_readv)";
  }
  if (!error.empty()) throw Error(error);
}

std::pair<size_t, size_t> ShmTransport::slice_of(int r, size_t count, size_t esize) const {
  // Slices start on cache lines: no two ranks write one line.
  const size_t align = std::max<size_t>(1, kLine / esize);
  const size_t slice = ceil_div(ceil_div(count, size_), align) * align;
  const size_t lo = std::min(count, r * slice);
  return {lo, std::min(count, lo + slice)};
}

bool ShmTransport::moves_rooted_directly(CollectiveType type, size_t bytes) const {
  // A preload in pieces costs the root's copy in and the receivers' copies out: from here one copy
  // (the receivers reading the root's input, or the root writing theirs) wins.
  if (type == CollectiveType::kBroadcast) {
    return reads_directly(broadcast_single_copy_bytes_, bytes) && size_ <= kMostRanksReadingOneRoot;
  }
  return type == CollectiveType::kScatter && (pushes_rooted(bytes) || reads_directly(single_copy_bytes_, bytes));
}

bool ShmTransport::pushes_rooted(size_t total) const { return heap_.enabled() && total >= kPushRootedFrom; }

bool ShmTransport::shares_rooted_move(size_t total) const {
  return reads_directly(rooted_share_bytes_, total) && size_ <= kMostRanksReadingOneRoot;
}

size_t ShmTransport::move_piece(size_t largest) const {
  // A move done in one round is two copies back to back (in, then out); in a few
  // pieces the sender fills one half-slot while receivers empty the other.
  constexpr size_t kDepth = 4, kSmallest = 32 * 1024;
  return std::min(chunk_, std::max(kSmallest, ceil_div(ceil_div(largest, kDepth), kLine) * kLine));
}

size_t ShmTransport::piece(size_t total, size_t k, size_t per_round) {
  const size_t start = k * per_round;
  return start >= total ? 0 : std::min(per_round, total - start);
}

int ShmTransport::arrive() {
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

void ShmTransport::await_step(uint64_t seq, int from) {
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

bool ShmTransport::peers_ahead() {
  for (int p = 0; p < size_; ++p) {
    if (segment_.state(p).seq.load(std::memory_order_seq_cst) > seq_) return true;
  }
  return false;
}

bool ShmTransport::wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout,
                                  bool spin) {
  auto ready = [&] { return local_work() || peers_ahead(); };
  // Calls often come back to back (a training step's gradients, a latency loop):
  // a short spin catches the next one without a futex sleep and wake-up.
  if (spin_for(ready, spin ? spin_ : std::chrono::microseconds(0), spin_yields_)) return true;
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
  return true;
}

void ShmTransport::keep_mpi_moving() {
  int arrived = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, inner_->comm(), &arrived, MPI_STATUS_IGNORE);
}

void ShmTransport::fail_if_a_peer_died() {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && segment_.state(p).seq.load() < seq_) fail_if_dead(p);
  }
}

void ShmTransport::fail_if_dead(int peer) {
  const pid_t pid = segment_.state(peer).pid.load();
  if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
    throw Error("rank " + std::to_string(peer) + " of this process set (pid " + std::to_string(pid) +
                ") exited while rank " + std::to_string(rank_) + " waited for it in shared memory");
  }
}

bool ShmTransport::reduce_for(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                              double scale, int root) {
  if (op == ReduceOp::kAdasum) return false;
  const bool wants_result = root == kEveryRank || rank_ == root;
  const size_t esize = dtype_size(dtype);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (count == 0) return true;
  if (size_ == 1) {
    copy_scaled(dtype, out, in, count, scale);
    return true;
  }
  if (count * esize <= small_bytes_) {
    // One step instead of two: every rank reduces the whole (small) buffer
    // from every slot, in rank order, so all ranks hold identical bits.
    begin_round();
    copy_bytes(slot(rank_), in, count * esize);
    if (!wants_result) {  // a reduce's non-root: its input is in, and nothing comes back
      step_without_waiting();
      return true;
    }
    step();
    reduce_to(dtype, op, out, slot(0), slot(1), count);
    for (int p = 2; p < size_; ++p) reduce_into(dtype, op, out, slot(p), count);
    scale_buffer(dtype, out, count, scale);
    return true;
  }
  const size_t per_round = chunk_ / esize;
  // Where every output lies in its rank's heap (a new array horo made: ShmCapabilities::output_allocator),
  // each rank writes its reduced slice straight into its peers' outputs, and nobody copies
  // slices out of the slots. The first round's step says where the outputs are (for a size
  // that reads its peers' inputs directly, a step of its own, which also says where they are).
  // A reduce's non-roots have no output that matters: an empty one is anywhere.
  const bool may_push = heap_.enabled() && count * esize >= allreduce_push_bytes_;
  const uint64_t located = may_push ? heap_.locate(out, wants_result ? count * esize : 0) : ShmHeap::kNowhere;
  if (reads_directly(root == kEveryRank ? reduce_single_copy_bytes_ : rooted_reduce_single_copy_bytes_,
                     count * esize)) {
    begin_round();
    mail(rank_)[0] = located;
    mail(rank_)[1] = reinterpret_cast<uint64_t>(in);
    mail(rank_)[2] = reinterpret_cast<uint64_t>(out);
    step();
    reduce_reading_peers(in, out, count, dtype, op, scale, root, outputs_located());
    return true;
  }
  bool push = false;
  // What this rank pushes in all (push_to_output), give or take the rounding of slices to lines.
  const size_t pushes = push_targets(root) * ceil_div(count, size_) * esize;
  for (size_t done = 0; done < count; done += per_round) {
    const size_t m = std::min(per_round, count - done);
    const auto [lo, hi] = slice_of(rank_, m, esize);
    const char* chunk = in + done * esize;
    // Peers read every slice of this rank's slot but its own: that one is reduced
    // straight from the input (measured 5-18% faster at every size than copying it in too).
    begin_round();
    if (done == 0) mail(rank_)[0] = located;
    copy_for_peers(slot(rank_), chunk, lo * esize);
    copy_for_peers(slot(rank_) + hi * esize, chunk + hi * esize, (m - hi) * esize);
    step();
    if (done == 0) push = outputs_located();
    // Reduce-scatter: this rank's slice, from its input and every peer's slot, straight
    // into its output, then copied into its slot for the peers. Reduced into the slot
    // instead, its plain stores would hit lines the peers read last round (slower, and erratic).
    if (hi > lo) {
      char* mine = out + (done + lo) * esize;
      const int first = rank_ == 0 ? 1 : 0;
      reduce_own_with(dtype, op, mine, chunk + lo * esize, slot(first) + lo * esize, hi - lo);
      for (int p = first + 1; p < size_; ++p) {
        if (p != rank_) reduce_into(dtype, op, mine, slot(p) + lo * esize, hi - lo);
      }
      // Scaled here, while the slice is in cache; its peers copy the scaled values.
      scale_buffer(dtype, mine, hi - lo, scale);
      // In place, a peer has published these elements of its input already (round start).
      for (int i = 1; i < size_ && push; ++i) {
        const int p = (rank_ + i) % size_;
        if (root == kEveryRank || p == root) push_to_output(outputs_[p] + (done + lo) * esize, mine, (hi - lo) * esize, pushes);
      }
      if (!push && rank_ != root) copy_for_peers(slot(rank_) + lo * esize, mine, (hi - lo) * esize);
    }
    if (!wants_result) {
      step_without_waiting();
      continue;
    }
    step();
    // All-gather by copy: each peer's slice from the peer that reduced it.
    for (int p = 0; p < size_ && !push; ++p) {
      const auto [plo, phi] = slice_of(p, m, esize);
      if (p != rank_ && phi > plo) copy_bytes(out + (done + plo) * esize, slot(p) + plo * esize, (phi - plo) * esize);
    }
  }
  return true;
}

void ShmTransport::reduce_reading_peers(const char* in, char* out, size_t count, DataType dtype, ReduceOp op,
                                        double scale, int root, bool push) {
  // Each rank reduces its slice, a piece at a time: its peers' parts of the piece read into
  // `piece_` (which stays in L2 for the reduction), then the result written into their outputs
  // (stored straight into them where they are in the heaps).
  // No one else reads or writes a rank's slice of any buffer, so no step is needed in between,
  // in place too: a peer's input there is read before its output there is written, both by
  // the slice's owner.
  const size_t esize = dtype_size(dtype);
  const auto [lo, hi] = slice_of(rank_, count, esize);
  const size_t per_piece = kReadPieceBytes / esize;
  const size_t pushes = push_targets(root) * (hi - lo) * esize;
  for (size_t at = lo; at < hi; at += per_piece) {
    const size_t n = std::min(per_piece, hi - at);
    char* mine = out + at * esize;
    reduce_with_peers_inputs(mine, in + at * esize, 1, at * esize, n, dtype, op);
    scale_buffer(dtype, mine, n, scale);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || (root != kEveryRank && p != root)) continue;
      if (push) {
        push_to_output(outputs_[p] + at * esize, mine, n * esize, pushes);
      } else {
        write_to(p, mail(p)[2] + at * esize, mine, n * esize);
      }
    }
  }
  finish_reads();  // every output whole, and every input free to change
}

void ShmTransport::reduce_with_peers_inputs(char* mine, const char* own, int word, size_t at, size_t n,
                                            DataType dtype, ReduceOp op) {
  const size_t bytes = n * dtype_size(dtype);
  piece_.resize(kReadPieceBytes);
  // In rank order after this rank's own part, as the other paths reduce.
  bool first = true;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    read_from(p, mail(p)[word] + at, piece_.data(), bytes);
    if (first) {
      reduce_own_with(dtype, op, mine, own, piece_.data(), n);
      first = false;
    } else {
      reduce_into(dtype, op, mine, piece_.data(), n);
    }
  }
}

bool ShmTransport::native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                 int root) {
  return reduce_for(input, output, count, dtype, op, 1.0, root);
}

bool ShmTransport::native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts,
                                         DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAdasum) return false;
  const size_t esize = dtype_size(dtype);
  const size_t per_peer = std::max<size_t>(1, round_down(chunk_ / size_, kLine) / esize);  // elements
  const std::vector<size_t> offset = prefix_offsets(counts);
  const size_t rounds = ceil_div(*std::max_element(counts.begin(), counts.end()), per_peer);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  // In place (output == input), round k writes output elements [k*q, (k+1)*q)
  // after every input element at or before them has been published (round <= k).
  // Out of place, this rank's own rows are reduced straight from its input (as allreduce
  // reduces its slice): nobody else reads them. In place, its output rows may overlap its
  // own input rows at another offset, which the reduce kernels (__restrict) do not allow.
  const bool own_from_input = in != out;
  const size_t total = (offset.back() + counts.back()) * esize;
  if (size_ > 1 && reads_directly(reducescatter_single_copy_bytes_, total)) {
    // Each rank reads its rows of every peer's input and reduces them: one copy, where the
    // slots take two. In place, the output's rows are other ranks' rows of the input, which
    // they may still be reading: the result waits in `rows_` until every read is done.
    publish_addresses(in);
    const bool in_place = !own_from_input;
    const size_t n = counts[rank_], per_piece = kReadPieceBytes / esize;
    if (in_place) rows_.resize(n * esize);
    char* dst = in_place ? rows_.data() : out;
    for (size_t at = 0; at < n; at += per_piece) {
      const size_t m = std::min(per_piece, n - at);
      const size_t from = (offset[rank_] + at) * esize;
      reduce_with_peers_inputs(dst + at * esize, in + from, 0, from, m, dtype, op);
    }
    finish_reads();
    if (in_place) copy_bytes(out, dst, n * esize);
    return true;
  }
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    for (int r = 0; r < size_; ++r) {
      const size_t n = piece(counts[r], k, per_peer);
      if (n && !(r == rank_ && own_from_input)) {
        copy_for_peers(slot(rank_) + r * per_peer * esize, in + (offset[r] + k * per_peer) * esize, n * esize);
      }
    }
    step();
    const size_t n = piece(counts[rank_], k, per_peer);
    if (n == 0) continue;
    char* dst = out + k * per_peer * esize;
    const char* own = in + (offset[rank_] + k * per_peer) * esize;
    auto rows_of = [&](int p) -> const char* {
      return p == rank_ && own_from_input ? own : slot(p) + rank_ * per_peer * esize;
    };
    if (size_ == 1) {
      copy_bytes(dst, rows_of(0), n * esize);
      continue;
    }
    reduce_to(dtype, op, dst, rows_of(0), rows_of(1), n);
    for (int p = 2; p < size_; ++p) reduce_into(dtype, op, dst, rows_of(p), n);
  }
  return true;
}

void ShmTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  const std::vector<size_t> offset = prefix_offsets(byte_counts);
  char* out = static_cast<char*>(output);
  const char* my = static_cast<const char*>(mine);
  if (my != out + offset[rank_] && byte_counts[rank_]) copy_own(out + offset[rank_], my, byte_counts[rank_]);
  if (heap_.enabled() && (output_preloaded(out) || outputs_in_heaps(out, offset.back() + byte_counts.back()))) {
    for (int i = 1; i < size_ && byte_counts[rank_]; ++i) {  // starting at the next rank: writers spread over the owners
      const int p = (rank_ + i) % size_;
      push_to_output(outputs_[p] + offset[rank_], my, byte_counts[rank_], (size_ - 1) * byte_counts[rank_]);
    }
    return pushed();
  }
  // Decided on the largest contribution, which every rank knows: the most any rank reads from one peer.
  if (reads_directly(exchange_single_copy_bytes_, *std::max_element(byte_counts.begin(), byte_counts.end()))) {
    publish_addresses(my);
    for (int i = 1; i < size_; ++i) {  // starting at the next rank: readers spread over the owners
      const int p = (rank_ + i) % size_;
      read_from(p, mail(p)[0], out + offset[p], byte_counts[p]);
    }
    finish_reads();
    return;
  }
  const size_t largest = *std::max_element(byte_counts.begin(), byte_counts.end());
  const size_t per_round = move_piece(largest);
  const size_t rounds = ceil_div(largest, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    const size_t n = piece(byte_counts[rank_], k, per_round);
    if (n) copy_for_peers(slot(rank_), my + k * per_round, n);
    step();
    for (int p = 0; p < size_; ++p) {
      const size_t pn = piece(byte_counts[p], k, per_round);
      if (p != rank_ && pn) copy_bytes(out + offset[p] + k * per_round, slot(p), pn);
    }
  }
}

void ShmTransport::gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) {
  const std::vector<size_t> offset = prefix_offsets(byte_counts);
  char* out = static_cast<char*>(output);
  const char* my = static_cast<const char*>(mine);
  if (rank_ == root && byte_counts[root]) copy_bytes(out + offset[root], my, byte_counts[root]);
  // Only the root's output matters: the others' are empty, which is anywhere. A small gather
  // takes one step through the segment rather than two.
  const size_t total = offset.back() + byte_counts.back();
  // Where the root's output lies in its heap, each sender writes its rows straight into it. From
  // rooted_share_bytes_, the root, idle otherwise, reads the first 1/size of every sender's rows
  // meanwhile (as a scatter's root writes the last 1/size of every receiver's).
  const bool share = shares_rooted_move(total);
  if (pushes_rooted(total) &&
      outputs_in_heaps(out, rank_ == root ? total : 0, nullptr, share ? my : nullptr)) {
    const auto root_part = [this, share](size_t rows) { return share ? round_down(rows / size_, kLine) : 0; };
    for (int p = 0; p < size_ && rank_ == root; ++p) {
      if (p != root) read_from(p, mail(p)[1], out + offset[p], root_part(byte_counts[p]));
    }
    const size_t from = root_part(byte_counts[rank_]), n = byte_counts[rank_] - from;
    if (rank_ != root && n) push_to_output(outputs_[root] + offset[rank_] + from, my + from, n, n);
    if (share) return finish_reads();  // the senders' inputs stay untouched until the root has read them
    return pushed(/*wait=*/rank_ == root);  // a sender needs nothing back
  }
  if (reads_directly(single_copy_bytes_, total)) {
    publish_addresses(my);
    for (int p = 0; p < size_ && rank_ == root; ++p) {
      if (p != root) read_from(p, mail(p)[0], out + offset[p], byte_counts[p]);
    }
    finish_reads();
    return;
  }
  const size_t largest = *std::max_element(byte_counts.begin(), byte_counts.end());
  const size_t per_round = move_piece(largest);
  const size_t rounds = ceil_div(largest, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    const size_t n = piece(byte_counts[rank_], k, per_round);
    if (rank_ != root && n) copy_for_peers(slot(rank_), my + k * per_round, n);
    if (rank_ != root) {
      k + 1 < rounds ? step() : step_without_waiting();  // a sender's last piece is in: nothing left to wait for
      continue;
    }
    step();
    for (int p = 0; p < size_; ++p) {
      const size_t pn = piece(byte_counts[p], k, per_round);
      if (p != root && pn) copy_bytes(out + offset[p] + k * per_round, slot(p), pn);
    }
  }
}

void ShmTransport::scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) {
  const std::vector<size_t> offset = prefix_offsets(byte_counts);
  const char* in = static_cast<const char*>(input);
  char* my = static_cast<char*>(mine);
  if (rank_ == root && byte_counts[root]) copy_bytes(my, in + offset[root], byte_counts[root]);
  const size_t total = offset.back() + byte_counts.back();
  // Where every receiver's output lies in its heap, the root writes each one's rows straight into
  // it: one copy. (The root's own is anywhere.) From rooted_share_bytes_, the receivers, idle
  // otherwise, read most of their rows from the root's input meanwhile, and the root writes only
  // the last 1/size of each (as a broadcast shares the work).
  const bool share = shares_rooted_move(total);
  if (pushes_rooted(total) &&
      outputs_in_heaps(my, rank_ == root ? 0 : byte_counts[rank_], nullptr, share ? in : nullptr)) {
    const auto root_part = [this, share](size_t rows) { return share ? round_down(rows / size_, kLine) : rows; };
    if (rank_ != root) read_from(root, mail(root)[1] + offset[rank_], my, byte_counts[rank_] - root_part(byte_counts[rank_]));
    for (int i = 1; i < size_ && rank_ == root; ++i) {
      const int r = (root + i) % size_;
      const size_t n = root_part(byte_counts[r]), from = byte_counts[r] - n;
      if (n) push_to_output(outputs_[r] + from, in + offset[r] + from, n, total - byte_counts[root]);
    }
    return share ? finish_reads() : pushed();
  }
  if (reads_directly(single_copy_bytes_, total)) {
    publish_addresses(in);
    if (rank_ != root) read_from(root, mail(root)[0] + offset[rank_], my, byte_counts[rank_]);
    finish_reads();
    return;
  }
  // In pieces, as a broadcast moves: the root copies one in while the receivers copy the previous one out.
  const size_t largest = *std::max_element(byte_counts.begin(), byte_counts.end());
  const size_t per_peer = std::min(round_down(chunk_ / size_, kLine), move_piece(largest));
  const size_t rounds = ceil_div(largest, per_peer);
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        const size_t n = piece(byte_counts[r], k, per_peer);
        if (r != root && n) copy_for_peers(slot(root) + r * per_peer, in + offset[r] + k * per_peer, n);
      }
    }
    step();
    const size_t n = piece(byte_counts[rank_], k, per_peer);
    if (rank_ != root && n) copy_bytes(my + k * per_peer, slot(root) + rank_ * per_peer, n);
  }
}

void ShmTransport::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                             const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = prefix_offsets(send_bytes), recv_at = prefix_offsets(recv_bytes);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (send_bytes[rank_]) copy_own(out + recv_at[rank_], in + send_at[rank_], send_bytes[rank_]);
  const bool located = output_preloaded(out);  // where p keeps what rank_ sends: in preloaded(p), else in slot(p)
  if (heap_.enabled() && (located || outputs_in_heaps(out, recv_at.back() + recv_bytes.back(), &recv_at))) {
    const size_t pushes = send_at.back() + send_bytes.back() - send_bytes[rank_];
    for (int i = 1; i < size_; ++i) {
      const int p = (rank_ + i) % size_;
      const size_t at = reinterpret_cast<const size_t*>(located ? preloaded(p) : slot(p))[rank_];
      if (send_bytes[p]) push_to_output(outputs_[p] + at, in + send_at[p], send_bytes[p], pushes);
    }
    return pushed();
  }
  const size_t per_peer = round_down(chunk_ / size_, kLine);
  // A pair's size is known at both ends (send_bytes[r] here is recv_bytes[rank_] on r), so
  // both decide alike, without a message, that the receiver reads it from the sender's input.
  const auto direct = [this](size_t bytes) { return reads_directly(exchange_single_copy_bytes_, bytes); };
  // Only the senders know the sizes of all pairs: round 0 tells everyone how many rounds
  // the pairs through the segment take, and whether any rank reads a peer directly.
  size_t my_rounds = 0;
  bool reads = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (direct(send_bytes[r])) {
      reads = true;
    } else {
      my_rounds = std::max(my_rounds, ceil_div(send_bytes[r], per_peer));
    }
  }
  size_t rounds = 1;
  bool anyone_reads = false;
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    if (k == 0) {
      mail(rank_)[0] = my_rounds;
      mail(rank_)[1] = reinterpret_cast<uint64_t>(in);
      mail(rank_)[2] = reinterpret_cast<uint64_t>(send_at.data());
      mail(rank_)[3] = reads ? 1 : 0;
    }
    for (int r = 0; r < size_; ++r) {
      const size_t n = direct(send_bytes[r]) ? 0 : piece(send_bytes[r], k, per_peer);
      if (r != rank_ && n) copy_for_peers(slot(rank_) + r * per_peer, in + send_at[r] + k * per_peer, n);
    }
    step();
    if (k == 0) {
      for (int p = 0; p < size_; ++p) {
        rounds = std::max<size_t>(rounds, mail(p)[0]);
        anyone_reads = anyone_reads || mail(p)[3];
      }
      // Each large piece for this rank starts at its sender's own send offset, read from its memory first.
      for (int i = 1; i < size_; ++i) {
        const int p = (rank_ + i) % size_;  // readers spread over the owners
        if (!direct(recv_bytes[p])) continue;
        size_t at = 0;
        read_from(p, mail(p)[2] + rank_ * sizeof(size_t), &at, sizeof(at));
        read_from(p, mail(p)[1] + at, out + recv_at[p], recv_bytes[p]);
      }
    }
    for (int p = 0; p < size_; ++p) {
      const size_t n = direct(recv_bytes[p]) ? 0 : piece(recv_bytes[p], k, per_peer);
      if (p != rank_ && n) copy_bytes(out + recv_at[p] + k * per_peer, slot(p) + rank_ * per_peer, n);
    }
  }
  // The senders' inputs (and send offsets) stay untouched until every direct read is done.
  if (anyone_reads) finish_reads();
}

void ShmTransport::broadcast(void* buf, size_t bytes, int root) {
  char* p = static_cast<char*>(buf);
  if (moves_rooted_directly(CollectiveType::kBroadcast, bytes)) {
    // Each reader copies most of the root's buffer straight into its own; the root, idle
    // otherwise, writes the last 1/size of every reader's (process_vm_writev), which balances
    // their work. Each reader says how much it reads (mail word 1): all of it, up to
    // kMostBytesReadWhole, where its last read of this root's buffer found the lines in its own
    // cache (the root's input unchanged since): the root's writes would pull lines the reader
    // holds, and its read is fast.
    const size_t share = round_down(bytes / size_, kLine);
    const bool reader = rank_ != root, may_read_whole = reader && bytes <= kMostBytesReadWhole;
    const RootRead read_now{p, bytes, root, false};
    const bool whole = may_read_whole && last_root_read_.cached && last_root_read_.same(read_now);
    const size_t own = whole ? bytes : bytes - share;
    publish_addresses(p, own);
    if (may_read_whole) {  // timed: whether the next one reads whole
      const auto start = std::chrono::steady_clock::now();
      read_from(root, mail(root)[0], p, own);
      last_root_read_ = read_now;
      last_root_read_.cached = cached_reads_.cached(own, std::chrono::steady_clock::now() - start);
    } else if (reader) {
      read_from(root, mail(root)[0], p, own);
    }
    for (int r = 0; r < size_ && rank_ == root; ++r) {
      const size_t read = mail(r)[1];
      if (r != root) write_to(r, mail(r)[0] + read, p + read, bytes - read);
    }
    finish_reads();
    return;
  }
  // The root copies pieces in while every reader copies the previous one out: faster than
  // reading the root's buffer directly below 16 MiB where ranks outnumber cores, and where more
  // than 4 read it (bindings.cc, HORO_SHM_SINGLE_COPY_BYTES=auto; elsewhere from 16 KiB).
  const size_t per_round = move_piece(bytes);
  const size_t rounds = ceil_div(bytes, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    const size_t n = piece(bytes, k, per_round);
    if (rank_ == root) copy_for_peers(slot(root), p + k * per_round, n);
    step();
    if (rank_ != root) copy_bytes(p + k * per_round, slot(root), n);
  }
}

void ShmTransport::preload(const void* input, size_t bytes, bool rooted) {
  // Area (cycle % 2) is free: peers read it last two cycles ago, before they joined the
  // control step of the cycle in between, which this rank has passed.
  ++preloads_;
  output_offered_ = false;
  preloaded_output_ = nullptr;
  char* area = segment_.preload_area(rank_, preloads_ & 1);
  bytes = std::min(bytes, preload_capacity());
  if (bytes > kPreloadPieceBytes && preloads_in_pieces()) {
    deferred_input_ = static_cast<const char*>(input);
    deferred_bytes_ = bytes;
    deferred_rooted_ = rooted;
    return;
  }
  // Only a root's input (broadcast, scatter) streams, as every peer reads the root's area; an
  // exchange's preload is small and read by one peer each, where streaming is slower.
  if (rooted) {
    copy_for_peers(area, input, bytes);
  } else {
    copy_bytes(area, input, bytes);
  }
  segment_.state(rank_).preloaded[preloads_ & 1].store(preloads_ << 32 | bytes, std::memory_order_release);
}

bool ShmTransport::preload_output(size_t bytes, const std::vector<size_t>& recv_at) {
  // The recv_at offsets take the place of an input in this cycle's area.
  if (!heap_.enabled() || bytes == 0 || recv_at.size() * sizeof(size_t) > preload_capacity()) return false;
  if (!reserved_output_ || reserved_bytes_ != bytes) {  // an unused one from an earlier cycle is kept
    reserved_output_ = allocate_output_(bytes);
    reserved_bytes_ = bytes;
    if (!reserved_output_) return false;  // the heap is full
  }
  std::memcpy(segment_.preload_area(rank_, preloads_ & 1), recv_at.data(), recv_at.size() * sizeof(size_t));
  segment_.state(rank_).output_at[preloads_ & 1].store(heap_.locate(reserved_output_.get(), bytes),
                                                       std::memory_order_relaxed);  // arrive() publishes it
  output_offered_ = true;
  return true;
}

std::shared_ptr<char> ShmTransport::take_preloaded_output() {
  if (!output_offered_) return nullptr;
  output_offered_ = false;
  preloaded_output_ = reserved_output_.get();
  return std::move(reserved_output_);
}

bool ShmTransport::output_preloaded(const void* output) {
  // Taken only where the control step showed every rank had located one for this collective.
  // Matched once: the collective it was taken for may free it (a TF op copies its result out)
  // before the next collective of the cycle, whose output the heap may then put at the same
  // address; that one must locate its outputs with a step of its own, as its peers do.
  if (!preloaded_output_ || output != std::exchange(preloaded_output_, nullptr)) return false;
  for (int p = 0; p < size_; ++p) outputs_[p] = heap_.of(p) + segment_.state(p).output_at[preloads_ & 1].load(std::memory_order_relaxed);
  return true;
}

void ShmTransport::fill_deferred_preload() {
  char* area = segment_.preload_area(rank_, preloads_ & 1);
  std::atomic<uint64_t>& ready = segment_.state(rank_).preloaded[preloads_ & 1];
  const char* input = std::exchange(deferred_input_, nullptr);
  const bool stream = deferred_rooted_ && stream_bytes_ > 0 && deferred_bytes_ >= stream_bytes_;
  for (size_t at = 0; at < deferred_bytes_; at += kPreloadPieceBytes) {
    const size_t n = std::min(kPreloadPieceBytes, deferred_bytes_ - at);
    stream ? stream_bytes(area + at, input + at, n) : copy_bytes(area + at, input + at, n);
    ready.store(preloads_ << 32 | (at + n), std::memory_order_release);
  }
}

void ShmTransport::await_preloaded(int rank, size_t bytes) {
  const std::atomic<uint64_t>& ready = segment_.state(rank).preloaded[preloads_ & 1];
  // This cycle's input, `bytes` of it at least (a word from an earlier cycle: none of it; the
  // count of cycles wraps at 2^32, hence equal, not at least).
  auto there = [&] {
    const uint64_t word = ready.load(std::memory_order_acquire);
    return word >> 32 == (preloads_ & 0xffffffffu) && (word & 0xffffffffu) >= bytes;
  };
  if (there()) return;
  // The rank is copying (it arrived at the step) and is done within microseconds; one that died
  // or stopped (SIGSTOP, a debugger) is noticed between spins, as a step's wait notices it.
  if (spin_for(there, spin_, spin_yields_)) return;
  WaitDeadline deadline("a peer's input in shared memory");
  while (!there()) {
    fail_if_dead(rank);
    keep_mpi_moving();
    deadline.poll(std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void ShmTransport::allreduce_bitand(std::vector<uint64_t>& words) {
  const size_t per_round = chunk_ / sizeof(uint64_t);
  for (size_t done = 0; done < words.size(); done += per_round) {
    const size_t n = std::min(per_round, words.size() - done);
    begin_round();
    copy_bytes(slot(rank_), words.data() + done, n * sizeof(uint64_t));
    if (deferred_input_) {  // step(), with the preload copied in between arriving and waiting
      const int missing = arrive();
      fill_deferred_preload();
      if (missing < size_) await_step(seq_, missing);
      unawaited_ = 0;
    } else {
      step();
    }
    for (int p = 0; p < size_; ++p) {
      const uint64_t* theirs = reinterpret_cast<const uint64_t*>(slot(p));
      for (size_t i = 0; i < n; ++i) words[done + i] &= theirs[i];
    }
  }
}

std::vector<std::string> ShmTransport::gather_bytes(const std::string& mine, int root) {
  std::vector<std::string> out(rank_ == root ? size_ : 0);
  std::vector<size_t> lengths(size_, 0);
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    if (k == 0) mail(rank_)[0] = mine.size();
    const size_t n = piece(mine.size(), k, chunk_);
    if (rank_ != root && n) copy_bytes(slot(rank_), mine.data() + k * chunk_, n);
    step();
    if (k == 0) {
      // Lengths travel in round 0's mailboxes, so everyone knows how many rounds follow.
      for (int p = 0; p < size_; ++p) {
        lengths[p] = mail(p)[0];
        rounds = std::max(rounds, ceil_div(lengths[p], chunk_));
      }
      if (rank_ == root) {
        for (int p = 0; p < size_; ++p) out[p].resize(lengths[p]);
        out[root] = mine;
      }
    }
    if (rank_ != root) continue;
    for (int p = 0; p < size_; ++p) {
      const size_t pn = piece(lengths[p], k, chunk_);
      if (p != root && pn) copy_bytes(&out[p][k * chunk_], slot(p), pn);
    }
  }
  return out;
}

void ShmTransport::broadcast_bytes(std::string& data, int root) {
  size_t length = data.size();
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    begin_round();
    const size_t n = piece(length, k, chunk_);
    if (rank_ == root) {
      if (k == 0) mail(root)[0] = length;
      if (n) copy_bytes(slot(root), data.data() + k * chunk_, n);
    }
    step();
    if (k == 0) {
      length = mail(root)[0];
      rounds = std::max<size_t>(1, ceil_div(length, chunk_));
      if (rank_ != root) data.resize(length);
    }
    const size_t got = piece(length, k, chunk_);
    if (rank_ != root && got) copy_bytes(&data[k * chunk_], slot(root), got);
  }
}

}  // namespace horo
