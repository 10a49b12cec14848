// The vocabulary every layer shares: element types, reduction ops, collective kinds.
// Integer values are part of the Python ABI (horo/_dtypes.py, horo.Sum, ...) and
// match Horovod's op numbering so ported scripts that pass raw ints still work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace horo {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kInt16 = 8,
  kBool = 9,  // moved (broadcast, allgather, alltoall, ...), never reduced
};
constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kAdasum = 2,  // allreduce only, float dtypes, power-of-two sets (collectives/adasum.h)
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};

enum class CollectiveType : uint8_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kAllgather = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kGather = 6,
  kScatter = 7,
  kReduce = 8,
  kAddProcessSet = 9,     // ranks in Request::splits; runs on the global set
  kRemoveProcessSet = 10,  // the set's id in Request::root
  kJoin = 11,
};
constexpr int kNumCollectiveTypes = 12;

// Where a tensor's memory lives. Every rank must agree (a host tensor on one
// rank and a GPU tensor on another is an error, not a hang); the device
// ordinal is each rank's own business and never crosses the wire.
enum class Memory : uint8_t {
  kHost = 0,
  kCuda = 1,
};
const char* memory_name(Memory memory);

size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);
bool dtype_is_float(DataType dtype);
bool dtype_reducible(DataType dtype);
bool dtype_valid(int code);

const char* op_name(ReduceOp op);
bool op_valid(int code);

const char* collective_name(CollectiveType type);
bool collective_valid(int code);
// Allreduce, reducescatter and reduce combine values (the dtype must be reducible).
bool collective_reduces(CollectiveType type);
// Those whose output, in the caller's buffer, has as many elements as the input. (Reducescatter's
// and scatter's outputs are shares, which may be empty, and an empty torch tensor's address is 0.)
bool collective_output_like_input(CollectiveType type);

}  // namespace horo
