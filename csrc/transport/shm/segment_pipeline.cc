#include "transport/shm/segment_pipeline.h"

#include <algorithm>

#include "common/copy_bytes.h"
#include "reduce/reduce_kernels.h"
#include "transport/shm/layout.h"

namespace horo {

size_t SegmentPipeline::move_piece(size_t largest) const {
  // A move done in one round is two copies back to back (in, then out); in a few
  // pieces the sender fills one half-slot while receivers empty the other.
  constexpr size_t kDepth = 4, kSmallest = 32 * 1024;
  return std::min(ctx_.chunk(), std::max(kSmallest, ceil_div(ceil_div(largest, kDepth), kLine) * kLine));
}

void SegmentPipeline::run(const ReduceCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size(), root = c.root;
  const size_t esize = c.esize(), count = c.count;
  const bool wants_result = c.wants_result(rank);
  const size_t per_round = ctx_.chunk() / esize;
  // Where every output lies in its rank's heap (a new array horo made: ShmCapabilities::output_allocator),
  // each rank writes its reduced slice straight into its peers' outputs, and nobody copies
  // slices out of the slots. The first round's step says where the outputs are.
  const uint64_t located = ctx_.reduced_output_at(c.out, c.bytes(), wants_result);
  bool push = false;
  // What this rank pushes in all (push_to_output), give or take the rounding of slices to lines.
  const size_t pushes = c.targets(size) * ceil_div(count, size) * esize;
  for (size_t done = 0; done < count; done += per_round) {
    const size_t m = std::min(per_round, count - done);
    const auto [lo, hi] = slice_of(rank, size, m, esize);
    const char* chunk = c.in + done * esize;
    // Peers read every slice of this rank's slot but its own: that one is reduced
    // straight from the input, which is faster than copying it in too.
    ctx_.begin_round();
    if (done == 0) ctx_.mail(rank).output_location() = located;
    ctx_.copy_for_peers(ctx_.slot(rank), chunk, lo * esize);
    ctx_.copy_for_peers(ctx_.slot(rank) + hi * esize, chunk + hi * esize, (m - hi) * esize);
    ctx_.step();
    if (done == 0) push = ctx_.outputs_located();
    // Reduce-scatter: this rank's slice, from its input and every peer's slot, straight
    // into its output, then copied into its slot for the peers. Reduced into the slot
    // instead, its plain stores would hit lines the peers read last round (slower, and erratic).
    if (hi > lo) {
      char* mine = c.out + (done + lo) * esize;
      const int first = rank == 0 ? 1 : 0;
      reduce_own_with(c.dtype, c.op, mine, chunk + lo * esize, ctx_.slot(first) + lo * esize, hi - lo);
      for (int p = first + 1; p < size; ++p) {
        if (p != rank) reduce_into(c.dtype, c.op, mine, ctx_.slot(p) + lo * esize, hi - lo);
      }
      // Scaled here, while the slice is in cache; its peers copy the scaled values.
      scale_buffer(c.dtype, mine, hi - lo, c.scale);
      // In place, a peer has published these elements of its input already (round start).
      for (int i = 1; i < size && push; ++i) {
        const int p = (rank + i) % size;
        if (c.sends_to(p)) ctx_.push_to_output(ctx_.output(p) + (done + lo) * esize, mine, (hi - lo) * esize, pushes);
      }
      if (!push && rank != root) ctx_.copy_for_peers(ctx_.slot(rank) + lo * esize, mine, (hi - lo) * esize);
    }
    if (!wants_result) {
      ctx_.step_without_waiting();
      continue;
    }
    ctx_.step();
    // All-gather by copy: each peer's slice from the peer that reduced it.
    for (int p = 0; p < size && !push; ++p) {
      const auto [plo, phi] = slice_of(p, size, m, esize);
      if (p != rank && phi > plo) copy_bytes(c.out + (done + plo) * esize, ctx_.slot(p) + plo * esize, (phi - plo) * esize);
    }
  }
}

void SegmentPipeline::run(const ReduceScatterCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t esize = c.esize;
  const size_t per_peer = std::max<size_t>(1, round_down(ctx_.chunk() / size, kLine) / esize);  // elements
  const size_t rounds = ceil_div(*std::max_element(c.counts.begin(), c.counts.end()), per_peer);
  // In place (output == input), round k writes output elements [k*q, (k+1)*q)
  // after every input element at or before them has been published (round <= k).
  // Out of place, this rank's own rows are reduced straight from its input (as allreduce
  // reduces its slice): nobody else reads them. In place, its output rows may overlap its
  // own input rows at another offset, which the reduce kernels (__restrict) do not allow.
  const bool own_from_input = c.in != c.out;
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    for (int r = 0; r < size; ++r) {
      const size_t n = piece(c.counts[r], k, per_peer);
      if (n && !(r == rank && own_from_input)) {
        ctx_.copy_for_peers(ctx_.slot(rank) + r * per_peer * esize, c.in + (c.offset[r] + k * per_peer) * esize,
                            n * esize);
      }
    }
    ctx_.step();
    const size_t n = piece(c.counts[rank], k, per_peer);
    if (n == 0) continue;
    char* dst = c.out + k * per_peer * esize;
    const char* own = c.in + (c.offset[rank] + k * per_peer) * esize;
    auto rows_of = [&](int p) -> const char* {
      return p == rank && own_from_input ? own : ctx_.slot(p) + rank * per_peer * esize;
    };
    if (size == 1) {
      copy_bytes(dst, rows_of(0), n * esize);
      continue;
    }
    reduce_to(c.dtype, c.op, dst, rows_of(0), rows_of(1), n);
    for (int p = 2; p < size; ++p) reduce_into(c.dtype, c.op, dst, rows_of(p), n);
  }
}

void SegmentPipeline::run(const AllgatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t per_round = move_piece(c.largest);
  const size_t rounds = ceil_div(c.largest, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    const size_t n = piece(c.bytes[rank], k, per_round);
    if (n) ctx_.copy_for_peers(ctx_.slot(rank), c.mine + k * per_round, n);
    ctx_.step();
    for (int p = 0; p < size; ++p) {
      const size_t pn = piece(c.bytes[p], k, per_round);
      if (p != rank && pn) copy_bytes(c.out + c.offset[p] + k * per_round, ctx_.slot(p), pn);
    }
  }
}

void SegmentPipeline::run(const GatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size(), root = c.root;
  const size_t largest = *std::max_element(c.bytes.begin(), c.bytes.end());
  const size_t per_round = move_piece(largest);
  const size_t rounds = ceil_div(largest, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    const size_t n = piece(c.bytes[rank], k, per_round);
    if (rank != root && n) ctx_.copy_for_peers(ctx_.slot(rank), c.mine + k * per_round, n);
    if (rank != root) {
      k + 1 < rounds ? ctx_.step() : ctx_.step_without_waiting();  // a sender's last piece is in: nothing left to wait for
      continue;
    }
    ctx_.step();
    for (int p = 0; p < size; ++p) {
      const size_t pn = piece(c.bytes[p], k, per_round);
      if (p != root && pn) copy_bytes(c.out + c.offset[p] + k * per_round, ctx_.slot(p), pn);
    }
  }
}

void SegmentPipeline::run(const ScatterCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size(), root = c.root;
  // In pieces, as a broadcast moves: the root copies one in while the receivers copy the previous one out.
  const size_t largest = *std::max_element(c.bytes.begin(), c.bytes.end());
  const size_t per_peer = std::min(round_down(ctx_.chunk() / size, kLine), move_piece(largest));
  const size_t rounds = ceil_div(largest, per_peer);
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    if (rank == root) {
      for (int r = 0; r < size; ++r) {
        const size_t n = piece(c.bytes[r], k, per_peer);
        if (r != root && n) ctx_.copy_for_peers(ctx_.slot(root) + r * per_peer, c.in + c.offset[r] + k * per_peer, n);
      }
    }
    ctx_.step();
    const size_t n = piece(c.bytes[rank], k, per_peer);
    if (rank != root && n) copy_bytes(c.mine + k * per_peer, ctx_.slot(root) + rank * per_peer, n);
  }
}

void SegmentPipeline::run(const AlltoallCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t per_peer = round_down(ctx_.chunk() / size, kLine);
  // A pair's size is known at both ends (send_bytes[r] here is recv_bytes[rank] on r), so
  // both decide alike, without a message, that the receiver reads it from the sender's input.
  const uint64_t direct_from = ctx_.thresholds().exchange_single_copy_bytes;
  const auto direct = [this, direct_from](size_t bytes) { return ctx_.reads_directly(direct_from, bytes); };
  // Only the senders know the sizes of all pairs: round 0 tells everyone how many rounds
  // the pairs through the segment take, and whether any rank reads a peer directly.
  size_t my_rounds = 0;
  bool reads = false;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    if (direct(c.send_bytes[r])) {
      reads = true;
    } else {
      my_rounds = std::max(my_rounds, ceil_div(c.send_bytes[r], per_peer));
    }
  }
  size_t rounds = 1;
  bool anyone_reads = false;
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    if (k == 0) {
      ctx_.mail(rank).rounds() = my_rounds;
      ctx_.mail(rank).input() = reinterpret_cast<uint64_t>(c.in);
      ctx_.mail(rank).send_at() = reinterpret_cast<uint64_t>(c.send_at.data());
      ctx_.mail(rank).reads_directly() = reads ? 1 : 0;
    }
    for (int r = 0; r < size; ++r) {
      const size_t n = direct(c.send_bytes[r]) ? 0 : piece(c.send_bytes[r], k, per_peer);
      if (r != rank && n) ctx_.copy_for_peers(ctx_.slot(rank) + r * per_peer, c.in + c.send_at[r] + k * per_peer, n);
    }
    ctx_.step();
    if (k == 0) {
      for (int p = 0; p < size; ++p) {
        rounds = std::max<size_t>(rounds, ctx_.mail(p).rounds());
        anyone_reads = anyone_reads || ctx_.mail(p).reads_directly();
      }
      // Each large piece for this rank starts at its sender's own send offset, read from its memory first.
      for (int i = 1; i < size; ++i) {
        const int p = (rank + i) % size;  // readers spread over the owners
        if (!direct(c.recv_bytes[p])) continue;
        size_t at = 0;
        ctx_.read_from(p, ctx_.mail(p).send_at() + rank * sizeof(size_t), &at, sizeof(at));
        ctx_.read_from(p, ctx_.mail(p).input() + at, c.out + c.recv_at[p], c.recv_bytes[p]);
      }
    }
    for (int p = 0; p < size; ++p) {
      const size_t n = direct(c.recv_bytes[p]) ? 0 : piece(c.recv_bytes[p], k, per_peer);
      if (p != rank && n) copy_bytes(c.out + c.recv_at[p] + k * per_peer, ctx_.slot(p) + rank * per_peer, n);
    }
  }
  // The senders' inputs (and send offsets) stay untouched until every direct read is done.
  if (anyone_reads) ctx_.finish_reads();
}

void SegmentPipeline::run(const BroadcastCall& c) {
  const int rank = ctx_.rank(), root = c.root;
  // The root copies pieces in while every reader copies the previous one out: below the
  // policy's broadcast_single_copy_bytes, and where more ranks read than its
  // most_ranks_reading_one_root, faster than reading the root's buffer directly.
  const size_t per_round = move_piece(c.bytes);
  const size_t rounds = ceil_div(c.bytes, per_round);
  for (size_t k = 0; k < rounds; ++k) {
    ctx_.begin_round();
    const size_t n = piece(c.bytes, k, per_round);
    if (rank == root) ctx_.copy_for_peers(ctx_.slot(root), c.buf + k * per_round, n);
    ctx_.step();
    if (rank != root) copy_bytes(c.buf + k * per_round, ctx_.slot(root), n);
  }
}

}  // namespace horo
