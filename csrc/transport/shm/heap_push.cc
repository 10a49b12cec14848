#include "transport/shm/heap_push.h"

#include "transport/shm/layout.h"

namespace horo {

bool HeapPush::eligible(const AllgatherCall& c) {
  return may_run(CollectiveType::kAllgather, c.largest) &&
         (control_.output_preloaded(c.out) || ctx_.outputs_in_heaps(c.out, c.total));
}

void HeapPush::run(const AllgatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  for (int i = 1; i < size && c.bytes[rank]; ++i) {  // starting at the next rank: writers spread over the owners
    const int p = (rank + i) % size;
    ctx_.push_to_output(ctx_.output(p) + c.offset[rank], c.mine, c.bytes[rank], (size - 1) * c.bytes[rank]);
  }
  ctx_.pushed();
}

bool HeapPush::eligible(const AlltoallCall& c) {
  // Asked of the control step first, as that match is taken once (output_preloaded).
  located_by_control_ = control_.output_preloaded(c.out);
  return may_run(CollectiveType::kAlltoall, 0) &&
         (located_by_control_ || ctx_.outputs_in_heaps(c.out, c.recv_at.back() + c.recv_bytes.back(), &c.recv_at));
}

void HeapPush::run(const AlltoallCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  const size_t pushes = c.send_at.back() + c.send_bytes.back() - c.send_bytes[rank];
  for (int i = 1; i < size; ++i) {
    const int p = (rank + i) % size;
    // Where p keeps what this rank sends.
    const char* recv_at = located_by_control_ ? control_.preloaded(p) : ctx_.slot(p);
    const size_t at = reinterpret_cast<const size_t*>(recv_at)[rank];
    if (c.send_bytes[p]) ctx_.push_to_output(ctx_.output(p) + at, c.in + c.send_at[p], c.send_bytes[p], pushes);
  }
  ctx_.pushed();
}

bool HeapPush::eligible(const GatherCall& c) {
  // Only the root's output matters: the others' are empty, which is anywhere.
  const bool root = ctx_.rank() == c.root;
  return may_run(CollectiveType::kGather, c.total) &&
         ctx_.outputs_in_heaps(c.out, root ? c.total : 0, nullptr, shares_rooted_move(c.total) ? c.mine : nullptr);
}

void HeapPush::run(const GatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  // Each sender writes its rows straight into the root's output. From rooted_share_bytes, the
  // root, idle otherwise, reads the first 1/size of every sender's rows meanwhile (as a
  // scatter's root writes the last 1/size of every receiver's).
  const bool share = shares_rooted_move(c.total);
  const auto root_part = [size, share](size_t rows) { return share ? round_down(rows / size, kLine) : 0; };
  for (int p = 0; p < size && rank == c.root; ++p) {
    if (p != c.root) ctx_.read_from(p, ctx_.mail(p).input(), c.out + c.offset[p], root_part(c.bytes[p]));
  }
  const size_t from = root_part(c.bytes[rank]), n = c.bytes[rank] - from;
  if (rank != c.root && n) ctx_.push_to_output(ctx_.output(c.root) + c.offset[rank] + from, c.mine + from, n, n);
  if (share) return ctx_.finish_reads();  // the senders' inputs stay untouched until the root has read them
  ctx_.pushed(/*wait=*/rank == c.root);  // a sender needs nothing back
}

bool HeapPush::eligible(const ScatterCall& c) {
  // The root's own output is anywhere.
  const int rank = ctx_.rank();
  return may_run(CollectiveType::kScatter, c.total) &&
         ctx_.outputs_in_heaps(c.mine, rank == c.root ? 0 : c.bytes[rank], nullptr,
                               shares_rooted_move(c.total) ? c.in : nullptr);
}

void HeapPush::run(const ScatterCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  // The root writes each receiver's rows straight into its output. From rooted_share_bytes, the
  // receivers, idle otherwise, read most of their rows from the root's input meanwhile, and the
  // root writes only the last 1/size of each (as a broadcast shares the work).
  const bool share = shares_rooted_move(c.total);
  const auto root_part = [size, share](size_t rows) { return share ? round_down(rows / size, kLine) : rows; };
  if (rank != c.root) {
    ctx_.read_from(c.root, ctx_.mail(c.root).input() + c.offset[rank], c.mine, c.bytes[rank] - root_part(c.bytes[rank]));
  }
  for (int i = 1; i < size && rank == c.root; ++i) {
    const int r = (c.root + i) % size;
    const size_t n = root_part(c.bytes[r]), from = c.bytes[r] - n;
    if (n) ctx_.push_to_output(ctx_.output(r) + from, c.in + c.offset[r] + from, n, c.total - c.bytes[c.root]);
  }
  share ? ctx_.finish_reads() : ctx_.pushed();
}

}  // namespace horo
