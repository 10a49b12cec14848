#include "transport/shm/reduce_reading_peers.h"

#include <algorithm>

#include "common/copy_bytes.h"
#include "reduce/reduce_kernels.h"
#include "transport/shm/layout.h"

namespace horo {

namespace {

// What a rank reads of one peer at a time: the piece stays in L2 for the reduction.
constexpr size_t kReadPieceBytes = 128 * 1024;

}  // namespace

void ReduceReadingPeers::run(const ReduceCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t esize = c.esize();
  // One step says where every rank's input and output are (and whether every output lies in
  // its heap, for plain stores into it).
  ctx_.begin_round();
  ctx_.mail(rank).output_location() = ctx_.reduced_output_at(c.out, c.bytes(), c.wants_result(rank));
  ctx_.mail(rank).input() = reinterpret_cast<uint64_t>(c.in);
  ctx_.mail(rank).output() = reinterpret_cast<uint64_t>(c.out);
  ctx_.step();
  const bool push = ctx_.outputs_located();
  // Each rank reduces its slice, a piece at a time. In place too: a peer's input there is read
  // before its output there is written, both by the slice's owner.
  const auto [lo, hi] = slice_of(rank, size, c.count, esize);
  const size_t per_piece = kReadPieceBytes / esize;
  const size_t pushes = c.targets(size) * (hi - lo) * esize;
  for (size_t at = lo; at < hi; at += per_piece) {
    const size_t n = std::min(per_piece, hi - at);
    char* mine = c.out + at * esize;
    reduce_with_peers_inputs(mine, c.in + at * esize, &ShmMailbox::input, at * esize, n, c.dtype, c.op);
    scale_buffer(c.dtype, mine, n, c.scale);
    for (int p = 0; p < size; ++p) {
      if (p == rank || !c.sends_to(p)) continue;
      if (push) {
        ctx_.push_to_output(ctx_.output(p) + at * esize, mine, n * esize, pushes);
      } else {
        ctx_.write_to(p, ctx_.mail(p).output() + at * esize, mine, n * esize);
      }
    }
  }
  ctx_.finish_reads();  // every output whole, and every input free to change
}

void ReduceReadingPeers::run(const ReduceScatterCall& c) {
  const int rank = ctx_.rank();
  const size_t esize = c.esize;
  // In place, the output's rows are other ranks' rows of the input, which they may still be
  // reading: the result waits in `rows_` until every read is done. Out of place, this rank's
  // own rows are reduced straight from its input.
  ctx_.publish_addresses(c.in);
  const bool in_place = c.in == c.out;
  const size_t n = c.counts[rank], per_piece = kReadPieceBytes / esize;
  if (in_place) rows_.resize(n * esize);
  char* dst = in_place ? rows_.data() : c.out;
  for (size_t at = 0; at < n; at += per_piece) {
    const size_t m = std::min(per_piece, n - at);
    const size_t from = (c.offset[rank] + at) * esize;
    reduce_with_peers_inputs(dst + at * esize, c.in + from, &ShmMailbox::address, from, m, c.dtype, c.op);
  }
  ctx_.finish_reads();
  if (in_place) copy_bytes(c.out, dst, n * esize);
}

void ReduceReadingPeers::reduce_with_peers_inputs(char* mine, const char* own, MailWord input_at, size_t at, size_t n,
                                                  DataType dtype, ReduceOp op) {
  const size_t bytes = n * dtype_size(dtype);
  piece_.resize(kReadPieceBytes);
  // In rank order after this rank's own part, as the other paths reduce.
  bool first = true;
  for (int p = 0; p < ctx_.size(); ++p) {
    if (p == ctx_.rank()) continue;
    ctx_.read_from(p, (ctx_.mail(p).*input_at)() + at, piece_.data(), bytes);
    if (first) {
      reduce_own_with(dtype, op, mine, own, piece_.data(), n);
      first = false;
    } else {
      reduce_into(dtype, op, mine, piece_.data(), n);
    }
  }
}

}  // namespace horo
