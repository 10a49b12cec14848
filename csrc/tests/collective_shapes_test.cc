// The shapes both executors give a fusion group's collective (engine/collective_shapes.h), as
// tables worked out by hand: uneven rows across ranks, fused groups, alltoall splits, and where
// packing puts each element. Rows split Horovod's way: the first rows % n ranks get one more.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/collective_shapes.h"

namespace horo {
namespace {

using Shape = std::vector<int64_t>;
using Sizes = std::vector<size_t>;
using Ints = std::vector<int32_t>;

std::string shapes_label(const std::vector<Shape>& shapes, int n) {
  std::string s = "n " + std::to_string(n) + ":";
  for (const Shape& shape : shapes) {
    s += " {";
    for (int64_t d : shape) s += std::to_string(d) + ",";
    s += "}";
  }
  return s;
}

TensorEntry entry(Shape shape, DataType dtype = DataType::kFloat32, const void* input = nullptr,
                  void* output = nullptr) {
  TensorEntry e;
  e.request.dtype = dtype;
  e.request.shape = std::move(shape);
  e.input = input;
  e.output = output;
  return e;
}

std::vector<TensorEntry> entries_of(const std::vector<Shape>& shapes, DataType dtype = DataType::kFloat32) {
  std::vector<TensorEntry> entries;
  for (const Shape& shape : shapes) entries.push_back(entry(shape, dtype));
  return entries;
}

// 32-bit elements as they are, counting the copies asked for.
struct Copy32 {
  Sizes counts;
  void operator()(char* to, const char* from, size_t count) {
    counts.push_back(count);
    std::memcpy(to, from, count * 4);
  }
};

struct AllgatherRow {
  int n;
  std::vector<Shape> shapes;          // this rank's shape of each tensor
  std::vector<Shape> per_rank;        // each tensor's rows on every rank (the agreed response's)
  Sizes blocks;                       // elements of each rank's block
  std::vector<Shape> output_shapes;
};

TEST(CollectiveShapes, AllgatherBlocksAndOutputs) {
  const AllgatherRow rows[] = {
      {2, {{3, 4}}, {{3, 3}}, {12, 12}, {{6, 4}}},
      {3, {{2, 2}}, {{2, 0, 5}}, {4, 0, 10}, {{7, 2}}},  // a rank with no rows
      {2, {{1, 2, 3}}, {{1, 2}}, {6, 12}, {{3, 2, 3}}},
      // fused: rank r's block holds its rows of the first tensor, then of the second
      {3, {{1, 2}, {2}}, {{1, 3, 0}, {2, 0, 1}}, {4, 6, 1}, {{4, 2}, {3}}},
  };
  for (const AllgatherRow& row : rows) {
    SCOPED_TRACE(shapes_label(row.shapes, row.n));
    std::vector<Response> group(row.shapes.size());
    for (size_t k = 0; k < group.size(); ++k) group[k].per_rank = row.per_rank[k];
    const std::vector<TensorEntry> entries = entries_of(row.shapes);
    Sizes blocks = {99};  // resized, not appended to
    allgather_blocks(group, entries, row.n, blocks);
    EXPECT_EQ(blocks, row.blocks);
    for (size_t k = 0; k < entries.size(); ++k) {
      AllocatedOutput out;
      const size_t bytes = gathered_output(entries[k].request, group[k].per_rank, row.n, out);
      EXPECT_EQ(out.shape, row.output_shapes[k]);
      EXPECT_EQ(bytes, elements(row.output_shapes[k]) * 4);
    }
  }
}

TEST(CollectiveShapes, AllgatherPacksThisRanksBlockAndUnpacksRankMajor) {
  // Blocks {4, 6, 1} at offsets {0, 4, 10}, as in the fused row above; this rank is 0.
  std::vector<Response> group(2);
  group[0].per_rank = {1, 3, 0};
  group[1].per_rank = {2, 0, 1};
  const Ints a_in = {0, 1}, b_in = {2, 3};
  Ints a_out(8, -1), b_out(3, -1);
  std::vector<TensorEntry> entries;
  entries.push_back(entry({1, 2}, DataType::kInt32, a_in.data(), nullptr));
  entries.push_back(entry({2}, DataType::kInt32, b_in.data(), nullptr));
  Ints buf(11, -1);
  Copy32 copy;
  pack(entries, reinterpret_cast<char*>(buf.data()), copy);
  EXPECT_EQ(buf, (Ints{0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(copy.counts, (Sizes{2, 2}));

  buf = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // as gathered: rank 1's six rows of a, rank 2's row of b
  char* outputs[] = {reinterpret_cast<char*>(a_out.data()), reinterpret_cast<char*>(b_out.data())};
  unpack_blocks(group, entries, Sizes{0, 4, 10}, reinterpret_cast<const char*>(buf.data()),
                [&](size_t k) { return outputs[k]; }, copy);
  EXPECT_EQ(a_out, (Ints{0, 1, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(b_out, (Ints{2, 3, 10}));
}

struct ReducescatterRow {
  int n;
  std::vector<Shape> shapes;
  Sizes segments;  // elements each rank receives
  Sizes mine;      // elements of each tensor rank 1 gets
};

TEST(CollectiveShapes, ReducescatterSegments) {
  const ReducescatterRow rows[] = {
      {2, {{4, 3}}, {6, 6}, {6}},
      {3, {{5}}, {2, 2, 1}, {2}},
      {4, {{2}}, {1, 1, 0, 0}, {1}},  // fewer rows than ranks
      {2, {{}}, {1, 0}, {0}},         // a scalar is one row
      {3, {{5, 2}, {4}}, {6, 5, 3}, {4, 1}},  // fused: rows 2,2,1 of pairs, then rows 2,1,1
  };
  for (const ReducescatterRow& row : rows) {
    SCOPED_TRACE(shapes_label(row.shapes, row.n));
    const std::vector<TensorEntry> entries = entries_of(row.shapes);
    Sizes segments;
    reducescatter_segments(entries, row.n, segments);
    EXPECT_EQ(segments, row.segments);
    for (size_t k = 0; k < entries.size(); ++k) EXPECT_EQ(rank_elements(row.shapes[k], row.n, 1), row.mine[k]);
  }
}

TEST(CollectiveShapes, ReducescatterPacksRankMajorAndUnpacksOwnRows) {
  // Segments {6, 5, 3} at offsets {0, 6, 11}, as in the fused row above.
  const Ints a_in = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, b_in = {100, 101, 102, 103};
  Ints a_out(4, -1), b_out(1, -1);
  std::vector<TensorEntry> entries;
  entries.push_back(entry({5, 2}, DataType::kInt32, a_in.data(), a_out.data()));
  entries.push_back(entry({4}, DataType::kInt32, b_in.data(), b_out.data()));
  Ints buf(14, -1);
  Sizes cursor;
  Copy32 copy;
  pack_segments(entries, 3, Sizes{0, 6, 11}, reinterpret_cast<char*>(buf.data()), copy, cursor);
  EXPECT_EQ(buf, (Ints{0, 1, 2, 3, 100, 101, 4, 5, 6, 7, 102, 8, 9, 103}));
  EXPECT_EQ(copy.counts, (Sizes{4, 4, 2, 2, 1, 1}));
  unpack_own_rows(entries, 3, 1, reinterpret_cast<const char*>(buf.data() + 6), copy);
  EXPECT_EQ(a_out, (Ints{4, 5, 6, 7}));
  EXPECT_EQ(b_out, (Ints{102}));
}

TEST(CollectiveShapes, FusedTensorsOneAfterAnother) {
  const Ints a_in = {1, 2}, b_in = {3, 4, 5};
  Ints a_out(2, 0), b_out(3, 0);
  std::vector<TensorEntry> entries;
  entries.push_back(entry({2}, DataType::kInt32, a_in.data(), a_out.data()));
  entries.push_back(entry({3, 1}, DataType::kInt32, b_in.data(), b_out.data()));
  EXPECT_EQ(total_elements(entries), 5u);
  Ints buf(5, 0);
  Copy32 copy;
  pack(entries, reinterpret_cast<char*>(buf.data()), copy);
  EXPECT_EQ(buf, (Ints{1, 2, 3, 4, 5}));
  buf = {6, 7, 8, 9, 10};
  unpack(entries, reinterpret_cast<const char*>(buf.data()), copy);
  EXPECT_EQ(a_out, (Ints{6, 7}));
  EXPECT_EQ(b_out, (Ints{8, 9, 10}));
  EXPECT_EQ(copy.counts, (Sizes{2, 3, 2, 3}));
}

struct AlltoallRow {
  int n, me;
  Shape shape;
  DataType dtype;
  Shape per_rank;  // n x n: rows from r to j at r * n + j; this rank's row is its splits
  Sizes send_bytes, recv_bytes;
  Shape received_splits, output_shape;
};

TEST(CollectiveShapes, AlltoallSplits) {
  const AlltoallRow rows[] = {
      // rows of 2 floats (8 bytes); rank 1 sends 2, 0, 3 rows and receives 4, 0, 2
      {3, 1, {5, 2}, DataType::kFloat32, {1, 4, 0, 2, 0, 3, 0, 2, 2}, {16, 0, 24}, {32, 0, 16}, {4, 0, 2}, {6, 2}},
      // 8-byte elements; rank 0 keeps all 3 of its rows and receives 1 of rank 1's
      {2, 0, {3}, DataType::kInt64, {3, 0, 1, 1}, {24, 0}, {24, 8}, {3, 1}, {4}},
      {2, 1, {2, 2, 2}, DataType::kFloat32, {1, 1, 0, 2}, {0, 32}, {16, 32}, {1, 2}, {3, 2, 2}},
  };
  for (const AlltoallRow& row : rows) {
    SCOPED_TRACE("n " + std::to_string(row.n) + ", rank " + std::to_string(row.me));
    Request q;
    q.dtype = row.dtype;
    q.shape = row.shape;
    q.splits.assign(row.per_rank.begin() + row.me * row.n, row.per_rank.begin() + (row.me + 1) * row.n);
    Sizes send, recv;
    AllocatedOutput out;
    const size_t bytes = alltoall_output(q, row.per_rank, row.n, row.me, send, recv, out);
    EXPECT_EQ(send, row.send_bytes);
    EXPECT_EQ(recv, row.recv_bytes);
    EXPECT_EQ(out.received_splits, row.received_splits);
    EXPECT_EQ(out.shape, row.output_shape);
    EXPECT_EQ(bytes, elements(row.output_shape) * dtype_size(row.dtype));
  }
}

TEST(CollectiveShapes, GatherAndScatterBytesPerRank) {
  Request q;
  q.dtype = DataType::kFloat32;
  q.shape = {2, 3};  // this rank's rows; rows of 12 bytes
  Sizes bytes;
  gatherv_bytes(q, {2, 0, 4}, 3, bytes);
  EXPECT_EQ(bytes, (Sizes{24, 0, 48}));
  AllocatedOutput out;
  EXPECT_EQ(gathered_output(q, {2, 0, 4}, 3, out), 72u);
  EXPECT_EQ(out.shape, (Shape{6, 3}));

  struct ScatterRow {
    int n;
    Shape shape;
    DataType dtype;
    Sizes bytes;
  };
  const ScatterRow rows[] = {
      {3, {7, 2}, DataType::kFloat64, {48, 32, 32}},  // rows 3, 2, 2 of 16 bytes
      {4, {2}, DataType::kFloat32, {4, 4, 0, 0}},
      {2, {4, 3}, DataType::kInt32, {24, 24}},
  };
  for (const ScatterRow& row : rows) {
    SCOPED_TRACE(shapes_label({row.shape}, row.n));
    q.dtype = row.dtype;
    q.shape = row.shape;
    scatterv_bytes(q, row.n, bytes);
    EXPECT_EQ(bytes, row.bytes);
  }
}

}  // namespace
}  // namespace horo
