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

  int64_t num_elements() const;
  // Everything that must agree across ranks (all but `rank`).
  bool same_signature(const Request& other) const;
  std::string shape_string() const;
};

struct Response {
  enum class Kind : uint8_t { kExecute = 0, kError = 1 };
  Kind kind = Kind::kExecute;
  Request request;    // the agreed description (rank field unused)
  std::string error;  // kError: the message every rank raises
};

std::string encode_requests(const std::vector<Request>& requests);
std::vector<Request> decode_requests(const std::string& bytes);
std::string encode_responses(const std::vector<Response>& responses);
std::vector<Response> decode_responses(const std::string& bytes);

}  // namespace horo
