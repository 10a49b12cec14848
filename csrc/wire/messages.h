// What ranks tell the coordinator (Request: "I have tensor X ready, like so")
// and what it answers (Response: "everyone has X: run it" or "X is wrong:
// here is why"), with their byte encoding for the control-plane collectives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace horo {

struct Request {
  int32_t rank = 0;
  CollectiveType type = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::string name;
  int32_t process_set = 0;      // 0: every rank
  int32_t root = 0;             // broadcast, gather, scatter, reduce (rank within the set)
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  // Non-empty: this rank refused the tensor at submission (why). The refusal
  // still goes to the coordinator, so the ranks that accepted their namesake
  // get an error instead of waiting for this rank forever.
  std::string rejection;
  Memory memory = Memory::kHost;

  int64_t num_elements() const;
  std::string shape_string() const;
};

struct Response {
  enum class Kind : uint8_t { kExecute = 0, kError = 1 };
  Kind kind = Kind::kExecute;
  Request request;    // the agreed description (rank field unused)
  std::string error;  // kError: the message every rank raises
  // allgather, gather: every rank's first dimension; alltoall: every rank's splits,
  // row-major (rank r's splits at [r * size, (r + 1) * size)); kError: the ranks
  // that refused the tensor at submission (they hold no tensor for it).
  std::vector<int64_t> per_rank;
  // Never on the wire: this cycle's control step carried every rank's input
  // (ShmCapabilities::preload), so the collective runs from there, alone.
  bool preloaded = false;

  // Whether rank `rank`'s request is one this (cached) response answers:
  // ragged collectives compare that rank's own first dimension or splits.
  bool answers(const Request& request, int rank, int size) const;
};

// Decoders throw horo::Error on any malformed input (truncated, trailing
// bytes, unknown enum values, a length larger than what remains): control
// messages come from other processes and are never trusted to be well formed.
std::string encode_requests(const std::vector<Request>& requests);
std::vector<Request> decode_requests(const std::string& bytes);
std::string encode_responses(const std::vector<Response>& responses);
std::vector<Response> decode_responses(const std::string& bytes);

}  // namespace horo
