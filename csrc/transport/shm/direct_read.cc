#include "transport/shm/direct_read.h"

#include "transport/shm/layout.h"

namespace horo {

void DirectRead::run(const AllgatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  ctx_.publish_addresses(c.mine);
  for (int i = 1; i < size; ++i) {  // starting at the next rank: readers spread over the owners
    const int p = (rank + i) % size;
    ctx_.read_from(p, ctx_.mail(p).address(), c.out + c.offset[p], c.bytes[p]);
  }
  ctx_.finish_reads();
}

void DirectRead::run(const GatherCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  ctx_.publish_addresses(c.mine);
  for (int p = 0; p < size && rank == c.root; ++p) {
    if (p != c.root) ctx_.read_from(p, ctx_.mail(p).address(), c.out + c.offset[p], c.bytes[p]);
  }
  ctx_.finish_reads();
}

void DirectRead::run(const ScatterCall& c) {
  const int rank = ctx_.rank();
  ctx_.publish_addresses(c.in);
  if (rank != c.root) ctx_.read_from(c.root, ctx_.mail(c.root).address() + c.offset[rank], c.mine, c.bytes[rank]);
  ctx_.finish_reads();
}

void DirectRead::run(const BroadcastCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size(), root = c.root;
  // Each reader copies most of the root's buffer straight into its own; the root, idle
  // otherwise, writes the last 1/size of every reader's (process_vm_writev), which balances
  // their work. Each reader says how much it reads (bytes_read): all of it, up to the policy's
  // broadcast_read_whole_bytes, where its last read of this root's buffer found the lines in its own
  // cache (the root's input unchanged since): the root's writes would pull lines the reader
  // holds, and its read is fast.
  const size_t share = round_down(c.bytes / size, kLine);
  const bool reader = rank != root, may_read_whole = reader && c.bytes <= ctx_.thresholds().broadcast_read_whole_bytes;
  const RootRead read_now{c.buf, c.bytes, root, false};
  const bool whole = may_read_whole && last_root_read_.cached && last_root_read_.same(read_now);
  const size_t own = whole ? c.bytes : c.bytes - share;
  ctx_.publish_addresses(c.buf, own);
  if (may_read_whole) {  // timed: whether the next one reads whole
    const auto start = std::chrono::steady_clock::now();
    ctx_.read_from(root, ctx_.mail(root).address(), c.buf, own);
    last_root_read_ = read_now;
    last_root_read_.cached = cached_reads_.cached(own, std::chrono::steady_clock::now() - start);
  } else if (reader) {
    ctx_.read_from(root, ctx_.mail(root).address(), c.buf, own);
  }
  for (int r = 0; r < size && rank == root; ++r) {
    const size_t read = ctx_.mail(r).bytes_read();
    if (r != root) ctx_.write_to(r, ctx_.mail(r).address() + read, c.buf + read, c.bytes - read);
  }
  ctx_.finish_reads();
}

}  // namespace horo
