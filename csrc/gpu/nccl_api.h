// The slice of NCCL's API horo calls, declared here so that building horo
// needs no NCCL header: the library is opened at run time (nccl_loader.h).
// tests/gpu/check_prototypes.cc compiles these declarations beside the real
// nccl.h and asserts that every signature, enum value and size matches.
//
// Only functions NCCL has had since 2.11 are used (ncclAvg, PreMulSum): gather,
// scatter and all-to-all are built from grouped ncclSend/ncclRecv, since
// ncclGather/ncclScatter/ncclAlltoAll only arrived in 2.28.
#pragma once

#include <cstddef>

#include "gpu/cuda_api.h"

struct ncclComm;  // opaque, as nccl.h declares it

namespace horo::nccl {

using Comm = ncclComm*;  // ncclComm_t

enum Result : int {  // ncclResult_t
  kSuccess = 0,
  kInProgress = 7,
};

enum DataType : int {  // ncclDataType_t
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kInt64 = 4,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

enum RedOp : int {  // ncclRedOp_t; PreMulSum ops are created at run time
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
  kAvg = 4,
};

enum ScalarResidence : int {  // ncclScalarResidence_t
  kScalarDevice = 0,
  kScalarHostImmediate = 1,
};

constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {                        // ncclUniqueId
  char internal[kUniqueIdBytes];
};

using cuda::Stream;

// X(symbol, return type, parameter types): the one table of what horo resolves.
#define HORO_NCCL_FUNCTIONS(X)                                                                      \
  X(ncclGetVersion, Result, (int*))                                                                 \
  X(ncclGetErrorString, const char*, (Result))                                                      \
  X(ncclGetUniqueId, Result, (UniqueId*))                                                           \
  X(ncclCommInitRank, Result, (Comm*, int, UniqueId, int))                                          \
  X(ncclCommDestroy, Result, (Comm))                                                                \
  X(ncclCommAbort, Result, (Comm))                                                                  \
  X(ncclCommGetAsyncError, Result, (Comm, Result*))                                                 \
  X(ncclRedOpCreatePreMulSum, Result, (RedOp*, void*, DataType, ScalarResidence, Comm))             \
  X(ncclRedOpDestroy, Result, (RedOp, Comm))                                                        \
  X(ncclAllReduce, Result, (const void*, void*, size_t, DataType, RedOp, Comm, Stream))             \
  X(ncclReduce, Result, (const void*, void*, size_t, DataType, RedOp, int, Comm, Stream))           \
  X(ncclBroadcast, Result, (const void*, void*, size_t, DataType, int, Comm, Stream))               \
  X(ncclReduceScatter, Result, (const void*, void*, size_t, DataType, RedOp, Comm, Stream))         \
  X(ncclAllGather, Result, (const void*, void*, size_t, DataType, Comm, Stream))                    \
  X(ncclSend, Result, (const void*, size_t, DataType, int, Comm, Stream))                           \
  X(ncclRecv, Result, (void*, size_t, DataType, int, Comm, Stream))                                 \
  X(ncclGroupStart, Result, ())                                                                     \
  X(ncclGroupEnd, Result, ())

#define HORO_DECLARE_FUNCTION_TYPE(symbol, result, params) using symbol##_t = result(*) params;
HORO_NCCL_FUNCTIONS(HORO_DECLARE_FUNCTION_TYPE)
#undef HORO_DECLARE_FUNCTION_TYPE

}  // namespace horo::nccl
