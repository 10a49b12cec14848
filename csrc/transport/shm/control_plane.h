// The controller's traffic through the segment's slots, so a steady-state cycle sends no MPI
// message: each cycle's control step (the AND of every rank's ready bits), with the input of the
// cached collective a rank expects next riding it (a preload: its peers compute their outputs
// from it with no step of their own) or, for an exchange too large for that, where its output
// lies; and the controller's full exchanges (gather_bytes, broadcast_bytes). The policy says
// which collectives ride the step (shm/policy.h); the executor computes them from preloaded().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/context.h"
#include "transport/shm/policy.h"

namespace horo {

class ControlPlane {
 public:
  explicit ControlPlane(ShmContext& ctx) : ctx_(ctx) {}

  // ShmCapabilities' preloads.
  size_t preload_capacity() const { return ctx_.size() > 1 ? ctx_.segment().preload_bytes() : 0; }
  void preload(const void* input, size_t bytes, bool rooted);
  // Cycles alternate between a rank's two areas, as rounds do between halves.
  const char* preloaded(int rank) { return ctx_.segment().preload_area(rank, preloads_ & 1); }
  bool preloads_in_pieces() const { return horo::preloads_in_pieces(ctx_.spin_yields()); }
  void await_preloaded(int rank, size_t bytes);
  bool preload_output(size_t bytes, const std::vector<size_t>& recv_at);
  std::shared_ptr<char> take_preloaded_output();
  // Whether `output` is the one this cycle's control step located (preload_output) on every rank:
  // ctx.output(r) is then rank r's, and where it keeps this rank's rows is preloaded(r)'s recv_at.
  bool output_preloaded(const void* output);

  // The control step.
  void allreduce_bitand(std::vector<uint64_t>& words);
  std::vector<std::string> gather_bytes(const std::string& mine, int root);
  void broadcast_bytes(std::string& data, int root);

 private:
  // A preload larger than one piece is copied in after this rank's arrival at the control
  // step, a piece at a time, each announced in its state's preloaded[] word: the readers,
  // released by the step, read a piece while this rank copies the next one in, where copying
  // everything in before arriving had them wait for all of it.
  void fill_deferred_preload();

  ShmContext& ctx_;
  uint64_t preloads_ = 0;  // cycles: preload() calls
  const char* deferred_input_ = nullptr;  // preload(): an input copied in by fill_deferred_preload()
  size_t deferred_bytes_ = 0;
  bool deferred_rooted_ = false;
  // preload_output(): memory laid out for this cycle's exchange, kept for the next where unused.
  std::shared_ptr<char> reserved_output_;
  size_t reserved_bytes_ = 0;
  bool output_offered_ = false;  // this cycle's control step says where reserved_output_ is
  const char* preloaded_output_ = nullptr;  // taken this cycle (take_preloaded_output), until used
};

}  // namespace horo
