// The slice of NCCL's API horo calls, declared here so that building horo
// needs no NCCL header: the library is opened at run time (nccl_loader.h).
// tests/gpu/check_prototypes.cc compiles these declarations beside the real
// nccl.h and asserts that every signature, enum value and size matches.
//
// Only functions NCCL has had since 2.14 are used (ncclCommInitRankConfig, for a
// non-blocking init horo can bound; ncclAvg and PreMulSum came in 2.11) (ncclAvg, PreMulSum): gather,
// scatter and all-to-all are built from grouped ncclSend/ncclRecv, since
// ncclGather/ncclScatter/ncclAlltoAll only arrived in 2.28.
#pragma once

#include <climits>
#include <cstddef>

#include "gpu/cuda_api.h"

struct ncclComm;  // opaque, as nccl.h declares it

namespace horo::nccl {

using Comm = ncclComm*;  // ncclComm_t

enum Result : int {  // ncclResult_t
  kSuccess = 0,
  kInProgress = 7,  // a non-blocking communicator is still working: poll ncclCommGetAsyncError
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

// ncclConfig_t as NCCL 2.14 first shipped it (ncclConfig_v21400). The struct is
// append-only and versioned: NCCL reads only the fields of the version a caller
// states, so this prefix works with every later NCCL (checked against the wheel's
// nccl.h by tests/gpu/check_prototypes.cc: offsets, magic and "undefined" values).
constexpr unsigned kConfigMagic = 0xcafebeef;  // NCCL_API_MAGIC
constexpr unsigned kConfigVersion = 21400;     // the layout below
constexpr int kConfigUndefInt = INT_MIN;       // NCCL_CONFIG_UNDEF_INT: NCCL's default
struct Config {
  size_t size = sizeof(Config);
  unsigned int magic = kConfigMagic;
  unsigned int version = kConfigVersion;
  int blocking = kConfigUndefInt;
  int cgaClusterSize = kConfigUndefInt;
  int minCTAs = kConfigUndefInt;
  int maxCTAs = kConfigUndefInt;
  const char* netName = nullptr;  // NCCL_CONFIG_UNDEF_PTR
};

using cuda::Stream;

// X(symbol, return type, parameter types): the one table of what horo resolves.
#define HORO_NCCL_FUNCTIONS(X)                                                                      \
  X(ncclGetVersion, Result, (int*))                                                                 \
  X(ncclGetErrorString, const char*, (Result))                                                      \
  X(ncclGetUniqueId, Result, (UniqueId*))                                                           \
  X(ncclCommInitRank, Result, (Comm*, int, UniqueId, int))                                          \
  X(ncclCommInitRankConfig, Result, (Comm*, int, UniqueId, int, Config*))                           \
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
