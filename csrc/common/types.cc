#include "common/types.h"

namespace horo {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt16: return "int16";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

bool dtype_is_float(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool dtype_reducible(DataType dtype) { return dtype != DataType::kBool; }

bool dtype_valid(int code) { return code >= 0 && code < kNumDataTypes; }

const char* memory_name(Memory memory) { return memory == Memory::kCuda ? "CUDA device" : "host"; }

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAdasum: return "Adasum";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
  }
  return "unknown";
}

bool op_valid(int code) { return code >= 0 && code <= 5; }

const char* collective_name(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllreduce: return "allreduce";
    case CollectiveType::kBroadcast: return "broadcast";
    case CollectiveType::kAllgather: return "allgather";
    case CollectiveType::kAlltoall: return "alltoall";
    case CollectiveType::kReducescatter: return "reducescatter";
    case CollectiveType::kBarrier: return "barrier";
    case CollectiveType::kGather: return "gather";
    case CollectiveType::kScatter: return "scatter";
    case CollectiveType::kReduce: return "reduce";
    case CollectiveType::kAddProcessSet: return "add_process_set";
    case CollectiveType::kRemoveProcessSet: return "remove_process_set";
    case CollectiveType::kJoin: return "join";
  }
  return "unknown";
}

bool collective_valid(int code) { return code >= 0 && code < kNumCollectiveTypes; }

bool collective_reduces(CollectiveType type) {
  return type == CollectiveType::kAllreduce || type == CollectiveType::kReducescatter || type == CollectiveType::kReduce;
}

bool collective_output_like_input(CollectiveType type) {
  return type == CollectiveType::kAllreduce || type == CollectiveType::kBroadcast || type == CollectiveType::kReduce;
}

}  // namespace horo
