// Compiled by tests/test_gpu_libraries.py against the real headers of the
// nvidia-nccl-cu13 and nvidia-cuda-runtime wheels: every function horo
// resolves at run time must have exactly the signature horo declares for it
// (csrc/gpu/*_api.h), and the enums and structs horo mirrors must have the
// real values and sizes. Compiling is the test; nothing runs.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <type_traits>

#include "gpu/cuda_api.h"
#include "gpu/nccl_api.h"
#include "gpu/nccl_loader.h"

namespace {

// Maps a type of horo's declarations to the real header's type.
template <typename T> struct Real { using type = T; };
template <typename T> using RealT = typename Real<T>::type;
template <> struct Real<horo::cuda::Status> { using type = cudaError_t; };
template <> struct Real<horo::cuda::MemcpyKind> { using type = cudaMemcpyKind; };
template <> struct Real<horo::cuda::DeviceAttr> { using type = cudaDeviceAttr; };
template <> struct Real<horo::nccl::Result> { using type = ncclResult_t; };
template <> struct Real<horo::nccl::DataType> { using type = ncclDataType_t; };
template <> struct Real<horo::nccl::RedOp> { using type = ncclRedOp_t; };
template <> struct Real<horo::nccl::ScalarResidence> { using type = ncclScalarResidence_t; };
template <> struct Real<horo::nccl::UniqueId> { using type = ncclUniqueId; };
template <> struct Real<horo::nccl::Config> { using type = ncclConfig_t; };
template <typename T> struct Real<const T> { using type = const RealT<T>; };
template <typename T> struct Real<T*> { using type = RealT<T>*; };
template <typename R, typename... A> struct Real<R (*)(A...)> { using type = RealT<R> (*)(RealT<A>...); };

// Passed by value or through pointers, so each mirrored type must match in size (the ABI) too.
template <typename Ours>
constexpr bool same_size = sizeof(Ours) == sizeof(RealT<Ours>) && alignof(Ours) == alignof(RealT<Ours>);
static_assert(same_size<horo::cuda::Status> && same_size<horo::cuda::MemcpyKind> && same_size<horo::cuda::DeviceAttr>);
static_assert(same_size<horo::nccl::Result> && same_size<horo::nccl::DataType> && same_size<horo::nccl::RedOp> &&
              same_size<horo::nccl::ScalarResidence> && same_size<horo::nccl::UniqueId>);

// The opaque handles are the headers' own types.
static_assert(std::is_same_v<horo::cuda::Stream, cudaStream_t>);
static_assert(std::is_same_v<horo::cuda::Event, cudaEvent_t>);
static_assert(std::is_same_v<horo::nccl::Comm, ncclComm_t>);

// Initialising a pointer of the real type from the function's address compiles
// only if the header declares `symbol` with exactly that type (cuda_runtime.h
// adds C++ template overloads of a few, so decltype(&symbol) cannot be used).
#define CHECK_PROTOTYPE(ns, symbol, result, params) \
  [[maybe_unused]] constexpr RealT<horo::ns::symbol##_t> ns##_##symbol = &::symbol;
#define CHECK_CUDA(symbol, result, params) CHECK_PROTOTYPE(cuda, symbol, result, params)
#define CHECK_NCCL(symbol, result, params) CHECK_PROTOTYPE(nccl, symbol, result, params)
HORO_CUDA_FUNCTIONS(CHECK_CUDA)
HORO_NCCL_FUNCTIONS(CHECK_NCCL)

static_assert(int(horo::cuda::kSuccess) == int(cudaSuccess) && int(horo::cuda::kErrorNoDevice) == int(cudaErrorNoDevice) &&
              int(horo::cuda::kErrorInsufficientDriver) == int(cudaErrorInsufficientDriver) &&
              int(horo::cuda::kErrorNotReady) == int(cudaErrorNotReady));
static_assert(int(horo::cuda::kMemcpyHostToDevice) == int(cudaMemcpyHostToDevice) &&
              int(horo::cuda::kMemcpyDeviceToHost) == int(cudaMemcpyDeviceToHost) &&
              int(horo::cuda::kMemcpyDeviceToDevice) == int(cudaMemcpyDeviceToDevice) &&
              int(horo::cuda::kMemcpyDefault) == int(cudaMemcpyDefault));
static_assert(int(horo::cuda::kStreamNonBlocking) == int(cudaStreamNonBlocking) &&
              int(horo::cuda::kEventDisableTiming) == int(cudaEventDisableTiming));

static_assert(int(horo::nccl::kSuccess) == int(ncclSuccess) && int(horo::nccl::kInProgress) == int(ncclInProgress));
static_assert(int(horo::nccl::kInt8) == int(ncclInt8) && int(horo::nccl::kUint8) == int(ncclUint8) && int(horo::nccl::kInt32) == int(ncclInt32) &&
              int(horo::nccl::kInt64) == int(ncclInt64) && int(horo::nccl::kFloat16) == int(ncclFloat16) &&
              int(horo::nccl::kFloat32) == int(ncclFloat32) && int(horo::nccl::kFloat64) == int(ncclFloat64) &&
              int(horo::nccl::kBfloat16) == int(ncclBfloat16));
static_assert(int(horo::nccl::kSum) == int(ncclSum) && int(horo::nccl::kProd) == int(ncclProd) && int(horo::nccl::kMax) == int(ncclMax) &&
              int(horo::nccl::kMin) == int(ncclMin) && int(horo::nccl::kAvg) == int(ncclAvg));
static_assert(int(horo::nccl::kScalarDevice) == int(ncclScalarDevice) &&
              int(horo::nccl::kScalarHostImmediate) == int(ncclScalarHostImmediate));
static_assert(int(horo::nccl::kUniqueIdBytes) == int(NCCL_UNIQUE_ID_BYTES));
static_assert(int(horo::cuda::kDevAttrMemoryPoolsSupported) == int(cudaDevAttrMemoryPoolsSupported));

// horo's Config is NCCL 2.14's ncclConfig_t, which later versions only append to: each field
// must sit where the real struct has it, and the markers must be NCCL's own.
#define SAME_FIELD(field)                                                                   \
  static_assert(offsetof(horo::nccl::Config, field) == offsetof(ncclConfig_t, field) &&     \
                sizeof(horo::nccl::Config::field) == sizeof(ncclConfig_t::field));
SAME_FIELD(size)
SAME_FIELD(magic)
SAME_FIELD(version)
SAME_FIELD(blocking)
SAME_FIELD(cgaClusterSize)
SAME_FIELD(minCTAs)
SAME_FIELD(maxCTAs)
SAME_FIELD(netName)
static_assert(sizeof(horo::nccl::Config) <= sizeof(ncclConfig_t) && alignof(horo::nccl::Config) == alignof(ncclConfig_t));
static_assert(horo::nccl::kConfigMagic == NCCL_API_MAGIC && horo::nccl::kConfigUndefInt == NCCL_CONFIG_UNDEF_INT);
static_assert(horo::nccl::kConfigVersion == NCCL_VERSION(2, 14, 0) && horo::nccl::kConfigVersion <= NCCL_VERSION_CODE);
static_assert(horo::nccl::kMinimumVersion == horo::nccl::kConfigVersion);

}  // namespace
