// The slice of the CUDA runtime API horo calls, declared here so that building
// horo needs no CUDA header: the library is opened at run time (cuda_loader.h).
// tests/gpu/check_prototypes.cc compiles these declarations beside the real
// cuda_runtime_api.h and asserts that every signature, enum value and size matches.
#pragma once

#include <cstddef>

// Opaque handle types, declared exactly as the CUDA headers declare them.
struct CUstream_st;
struct CUevent_st;

namespace horo::cuda {

using Stream = CUstream_st*;  // cudaStream_t
using Event = CUevent_st*;    // cudaEvent_t

enum Status : int {  // cudaError_t (the values horo names)
  kSuccess = 0,
  kErrorInsufficientDriver = 35,
  kErrorNoDevice = 100,
  kErrorNotReady = 600,
};

enum MemcpyKind : int {  // cudaMemcpyKind
  kMemcpyHostToDevice = 1,
  kMemcpyDeviceToHost = 2,
  kMemcpyDeviceToDevice = 3,
  kMemcpyDefault = 4,  // direction from the pointers (unified addressing)
};

enum DeviceAttr : int {  // cudaDeviceAttr (the values horo asks)
  kDevAttrMemoryPoolsSupported = 115,  // cudaMallocAsync / cudaFreeAsync work on this device
};

constexpr unsigned kStreamNonBlocking = 0x01;  // cudaStreamNonBlocking
constexpr unsigned kEventDisableTiming = 0x02;  // cudaEventDisableTiming

// X(symbol, return type, parameter types): the one table of what horo resolves.
#define HORO_CUDA_FUNCTIONS(X)                                                           \
  X(cudaGetErrorString, const char*, (Status))                                            \
  X(cudaGetDeviceCount, Status, (int*))                                                   \
  X(cudaRuntimeGetVersion, Status, (int*))                                                \
  X(cudaDriverGetVersion, Status, (int*))                                                 \
  X(cudaGetDevice, Status, (int*))                                                        \
  X(cudaSetDevice, Status, (int))                                                         \
  X(cudaDeviceGetPCIBusId, Status, (char*, int, int))                                     \
  X(cudaStreamCreateWithFlags, Status, (Stream*, unsigned))                               \
  X(cudaStreamDestroy, Status, (Stream))                                                  \
  X(cudaStreamWaitEvent, Status, (Stream, Event, unsigned))                               \
  X(cudaStreamSynchronize, Status, (Stream))                                              \
  X(cudaEventCreateWithFlags, Status, (Event*, unsigned))                                 \
  X(cudaEventRecord, Status, (Event, Stream))                                             \
  X(cudaEventQuery, Status, (Event))                                                      \
  X(cudaEventSynchronize, Status, (Event))                                                \
  X(cudaEventDestroy, Status, (Event))                                                    \
  X(cudaMalloc, Status, (void**, size_t))                                                 \
  X(cudaFree, Status, (void*))                                                            \
  X(cudaMallocHost, Status, (void**, size_t))                                             \
  X(cudaFreeHost, Status, (void*))                                                        \
  X(cudaMemcpyAsync, Status, (void*, const void*, size_t, MemcpyKind, Stream))                    \
  X(cudaDeviceGetAttribute, Status, (int*, DeviceAttr, int))                                       \
  X(cudaMallocAsync, Status, (void**, size_t, Stream))                                             \
  X(cudaFreeAsync, Status, (void*, Stream))

#define HORO_DECLARE_FUNCTION_TYPE(symbol, result, params) using symbol##_t = result(*) params;
HORO_CUDA_FUNCTIONS(HORO_DECLARE_FUNCTION_TYPE)
#undef HORO_DECLARE_FUNCTION_TYPE

}  // namespace horo::cuda
