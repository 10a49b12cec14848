// The control messages' codec: what is encoded comes back field for field, and malformed bytes
// (from another process, never trusted) raise horo::Error instead of reading past the end or
// allocating what a hostile length asks for.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "wire/messages.h"

namespace horo {
namespace {

Request full_request() {
  Request q;
  q.rank = 3;
  q.type = CollectiveType::kAlltoall;
  q.dtype = DataType::kBFloat16;
  q.op = ReduceOp::kProduct;
  q.prescale = 0.25;
  q.postscale = -3.5;
  q.shape = {7, 0, 1LL << 40};
  q.name = std::string("grad/layer.1\0with a NUL", 23);
  q.process_set = 2;
  q.root = 1;
  q.splits = {1, 2, 4};
  q.rejection = "rank 3 refused it";
  q.memory = Memory::kCuda;
  return q;
}

void expect_same(const Request& a, const Request& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.prescale, b.prescale);
  EXPECT_EQ(a.postscale, b.postscale);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.process_set, b.process_set);
  EXPECT_EQ(a.root, b.root);
  EXPECT_EQ(a.splits, b.splits);
  EXPECT_EQ(a.rejection, b.rejection);
  EXPECT_EQ(a.memory, b.memory);
}

TEST(WireMessages, RequestsRoundTripFieldForField) {
  Request empty;  // defaults, empty shape (a scalar) and empty strings
  const std::vector<Request> sent = {full_request(), empty, full_request()};
  const std::vector<Request> got = decode_requests(encode_requests(sent));
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
  EXPECT_TRUE(decode_requests(encode_requests({})).empty());
}

TEST(WireMessages, ResponsesRoundTripFieldForField) {
  Response run;
  run.request = full_request();
  run.per_rank = {1, 2, 4, 2, 2, 2, 0, 0, 9};
  Response failed;
  failed.kind = Response::Kind::kError;
  failed.request.name = "w";
  failed.error = "ranks disagree on the shape of w: rank 0 [4], rank 1 [5]";
  failed.per_rank = {1};
  const auto got = decode_responses(encode_responses({run, failed}));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, Response::Kind::kExecute);
  expect_same(got[0].request, run.request);
  EXPECT_EQ(got[0].per_rank, run.per_rank);
  EXPECT_EQ(got[1].kind, Response::Kind::kError);
  EXPECT_EQ(got[1].error, failed.error);
  EXPECT_EQ(got[1].per_rank, failed.per_rank);
  EXPECT_FALSE(got[0].preloaded) << "never on the wire";
}

TEST(WireMessages, EveryTruncationIsRejected) {
  const std::string bytes = encode_requests({full_request()});
  for (size_t n = 1; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_requests(bytes.substr(0, n)), Error) << "cut at " << n << " of " << bytes.size();
  }
  Response p;
  p.request = full_request();
  p.per_rank = {5, 6};
  const std::string responses = encode_responses({p});
  for (size_t n = 1; n < responses.size(); ++n) {
    EXPECT_THROW(decode_responses(responses.substr(0, n)), Error) << "cut at " << n;
  }
}

// Offsets in an encoded Request: rank (int32) at 0, then one byte each for type, dtype, op.
constexpr size_t kTypeAt = 4, kDtypeAt = 5, kOpAt = 6;

TEST(WireMessages, UnknownEnumValuesAreRejected) {
  const std::string good = encode_requests({Request{}});
  for (auto [at, value, what] : std::vector<std::tuple<size_t, int, std::string>>{
           {kTypeAt, kNumCollectiveTypes, "collective"},
           {kDtypeAt, kNumDataTypes, "dtype"},
           {kOpAt, static_cast<int>(ReduceOp::kProduct) + 1, "reduction op"},
           {good.size() - 1, 2, ""}}) {  // the last byte: memory, host or cuda only
    std::string bad = good;
    bad[at] = static_cast<char>(value);
    try {
      decode_requests(bad);
      ADD_FAILURE() << "accepted " << value << " at byte " << at;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  std::string bad_kind = encode_responses({Response{}});
  bad_kind[0] = 2;  // neither execute nor error
  EXPECT_THROW(decode_responses(bad_kind), Error);
}

TEST(WireMessages, AHostileLengthIsRejectedBeforeAllocating) {
  Request q;
  q.name = "n";
  std::string bytes = encode_requests({q});
  // The shape's count follows rank, 3 enum bytes and two doubles: claim 2^32 - 1 elements.
  const size_t shape_count_at = 4 + 3 + 8 + 8;
  for (size_t i = 0; i < 4; ++i) bytes[shape_count_at + i] = static_cast<char>(0xff);
  try {
    decode_requests(bytes);
    ADD_FAILURE() << "accepted a list longer than the message";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longer than the message"), std::string::npos) << e.what();
  }
}

TEST(WireMessages, ACachedResponseAnswersOnlyTheRequestItWasMadeFor) {
  Response p;
  p.request.name = "x";
  p.request.shape = {4, 3};
  Request q = p.request;
  EXPECT_TRUE(p.answers(q, 0, 2));
  q.shape = {4, 4};
  EXPECT_FALSE(p.answers(q, 0, 2));
  q = p.request;
  q.prescale = 2.0;
  EXPECT_FALSE(p.answers(q, 0, 2));
  // alltoall: the rank's own splits, in its row of per_rank
  Response x;
  x.request.type = CollectiveType::kAlltoall;
  x.request.name = "x";
  x.request.shape = {3, 2};
  x.per_rank = {1, 2, 0, 5};  // rank 0 sends 1, 2; rank 1 sends 0, 5
  Request mine = x.request;
  mine.shape = {5, 2};
  mine.splits = {0, 5};
  EXPECT_TRUE(x.answers(mine, 1, 2));
  EXPECT_FALSE(x.answers(mine, 0, 2));
  mine.shape = {5, 3};
  EXPECT_FALSE(x.answers(mine, 1, 2)) << "trailing dimensions must match";
}

}  // namespace
}  // namespace horo
