// Allreduce, reduce and reducescatter with one copy of each input: every rank reads its slice
// (its rows) of every peer's input directly (process_vm_readv), a piece at a time into a buffer
// that stays in L2, and reduces it into its output; an allreduce's or reduce's rank then writes
// the result into its peers' outputs (plain stores where those lie in the heaps, else
// process_vm_writev). No one else reads or writes a rank's slice, so no step is needed in
// between; the last step (finish_reads) frees every buffer and carries any failure.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/shm/calls.h"
#include "transport/shm/context.h"

namespace horo {

class ReduceReadingPeers {
 public:
  static constexpr ShmPath kPath = ShmPath::kReduceReadingPeers;
  explicit ReduceReadingPeers(ShmContext& ctx) : ctx_(ctx) {}

  bool eligible(const ReduceCall& c) const { return ctx_.path_eligible(kPath, c.type(), c.bytes()); }
  void run(const ReduceCall& c);
  bool eligible(const ReduceScatterCall& c) const {
    return ctx_.path_eligible(kPath, CollectiveType::kReducescatter, c.total);
  }
  void run(const ReduceScatterCall& c);

 private:
  // The mailbox accessor that holds each peer's input address: a reducescatter publishes it
  // (address), an allreduce sends it beside its output's (input).
  using MailWord = uint64_t& (ShmMailbox::*)();
  // mine = own (op) every peer's `n` elements from byte `at` of the buffer at its mailbox's
  // `input_at`, each read into piece_ (kReadPieceBytes at most) and reduced from there.
  void reduce_with_peers_inputs(char* mine, const char* own, MailWord input_at, size_t at, size_t n,
                                DataType dtype, ReduceOp op);

  ShmContext& ctx_;
  std::vector<char> piece_;  // one peer's part of a piece, read here
  std::vector<char> rows_;   // an in-place reducescatter's result, until its peers' reads are done
};

}  // namespace horo
