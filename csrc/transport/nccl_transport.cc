#include "transport/nccl_transport.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "gpu/cuda_loader.h"
#include "gpu/nccl_loader.h"
#include "reduce/half.h"

namespace horo {

namespace {

nccl::DataType nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return nccl::kUint8;
    case DataType::kInt8: return nccl::kInt8;
    case DataType::kInt32: return nccl::kInt32;
    case DataType::kInt64: return nccl::kInt64;
    case DataType::kFloat16: return nccl::kFloat16;
    case DataType::kBFloat16: return nccl::kBfloat16;
    case DataType::kFloat32: return nccl::kFloat32;
    case DataType::kFloat64: return nccl::kFloat64;
  }
  throw Error("unknown dtype");
}

// Bytes move as uint8: NCCL counts elements, and byte collectives have no element type.
constexpr nccl::DataType kBytes = nccl::kUint8;

// Where a reduction's scale goes: the factor every input is multiplied by before the sum.
double factor(ReduceOp op, double scale, int size) { return op == ReduceOp::kAverage ? scale / size : scale; }

std::vector<size_t> offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> out(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) out[r] = out[r - 1] + counts[r - 1];
  return out;
}

bool all_equal(const std::vector<size_t>& v) {
  for (size_t x : v) {
    if (x != v.front()) return false;
  }
  return true;
}

// ncclGroupStart/End around a batch of calls, ended even when one throws.
class Group {
 public:
  Group() { nccl::check(nccl::api().ncclGroupStart(), "ncclGroupStart"); }
  ~Group() noexcept(false) {
    const nccl::Result r = nccl::api().ncclGroupEnd();
    if (std::uncaught_exceptions() == 0) nccl::check(r, "ncclGroupEnd");
  }
};

}  // namespace

NcclTransport::NcclTransport(Transport& control, int device) : control_(control), device_(device) {
  cuda::DeviceGuard on(device);
  const nccl::Api& api = nccl::api();
  // Rank 0 makes the id; an empty broadcast tells the others it could not, so nobody waits in init.
  std::string id_bytes;
  std::string failure;
  if (rank() == 0) {
    nccl::UniqueId id;
    const nccl::Result r = api.ncclGetUniqueId(&id);
    if (r == nccl::kSuccess) {
      id_bytes.assign(id.internal, sizeof id.internal);
    } else {
      failure = std::string("ncclGetUniqueId failed: ") + api.ncclGetErrorString(r);
    }
  }
  control_.broadcast_bytes(id_bytes, 0);
  if (id_bytes.size() != nccl::kUniqueIdBytes) {
    throw Error(failure.empty() ? "rank 0 could not create the NCCL unique id" : failure);
  }
  nccl::UniqueId id;
  std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
  cuda::check(cuda::api().cudaStreamCreateWithFlags(&stream_, cuda::kStreamNonBlocking), "cudaStreamCreateWithFlags");
  const nccl::Result r = api.ncclCommInitRank(&comm_, size(), id, rank());
  if (r != nccl::kSuccess) {
    cuda::api().cudaStreamDestroy(stream_);
    nccl::check(r, "ncclCommInitRank");
  }
}

NcclTransport::~NcclTransport() {
  cuda::DeviceGuard on(device_);
  // Queued work finishes first; then the communicator goes, then its stream.
  cuda::api().cudaStreamSynchronize(stream_);
  nccl::api().ncclCommDestroy(comm_);
  cuda::api().cudaStreamDestroy(stream_);
}

bool NcclTransport::can_reduce(DataType dtype, ReduceOp op, double scale) {
  if (op == ReduceOp::kAdasum) return false;
  const bool sums = op == ReduceOp::kSum || op == ReduceOp::kAverage;
  if (!sums) return scale == 1.0;
  if (dtype_is_float(dtype)) return true;
  // Integers: NCCL's PreMulSum multiplies in the integer type, exact only for a
  // whole scale; averages divide differently from horo's CPU path, which MPI staging keeps.
  return op == ReduceOp::kSum && scale == std::floor(scale);
}

nccl::RedOp NcclTransport::reduction(DataType dtype, ReduceOp op, double scale, bool* created) {
  *created = false;
  switch (op) {
    case ReduceOp::kMin: return nccl::kMin;
    case ReduceOp::kMax: return nccl::kMax;
    case ReduceOp::kProduct: return nccl::kProd;
    default: break;
  }
  if (op == ReduceOp::kSum && scale == 1.0) return nccl::kSum;
  if (op == ReduceOp::kAverage && scale == 1.0) return nccl::kAvg;
  // PreMulSum: each input times the scalar, then summed (the scalar in the data's own type).
  const double f = factor(op, scale, size());
  alignas(8) unsigned char scalar[8];
  switch (dtype) {
    case DataType::kFloat16: { uint16_t v = float_to_half(static_cast<float>(f)); std::memcpy(scalar, &v, 2); break; }
    case DataType::kBFloat16: { uint16_t v = float_to_bfloat16(static_cast<float>(f)); std::memcpy(scalar, &v, 2); break; }
    case DataType::kFloat32: { float v = static_cast<float>(f); std::memcpy(scalar, &v, 4); break; }
    case DataType::kFloat64: std::memcpy(scalar, &f, 8); break;
    case DataType::kUInt8: { uint8_t v = static_cast<uint8_t>(f); std::memcpy(scalar, &v, 1); break; }
    case DataType::kInt8: { int8_t v = static_cast<int8_t>(f); std::memcpy(scalar, &v, 1); break; }
    case DataType::kInt32: { int32_t v = static_cast<int32_t>(f); std::memcpy(scalar, &v, 4); break; }
    case DataType::kInt64: { int64_t v = static_cast<int64_t>(f); std::memcpy(scalar, &v, 8); break; }
  }
  nccl::RedOp custom;
  nccl::check(nccl::api().ncclRedOpCreatePreMulSum(&custom, scalar, nccl_type(dtype), nccl::kScalarHostImmediate, comm_),
              "ncclRedOpCreatePreMulSum");
  *created = true;
  return custom;
}

int NcclTransport::isend(const void* buf, size_t bytes, int peer) {
  pending_.push_back({true, const_cast<void*>(buf), bytes, peer});
  return static_cast<int>(pending_.size()) - 1;
}

int NcclTransport::irecv(void* buf, size_t bytes, int peer) {
  pending_.push_back({false, buf, bytes, peer});
  return static_cast<int>(pending_.size()) - 1;
}

void NcclTransport::wait_all() {
  if (pending_.empty()) return;
  std::vector<PointToPoint> batch;
  batch.swap(pending_);
  {
    Group group;
    for (const auto& p : batch) {
      if (p.send) {
        nccl::check(nccl::api().ncclSend(p.buf, p.bytes, kBytes, p.peer, comm_, stream_), "ncclSend");
      } else {
        nccl::check(nccl::api().ncclRecv(p.buf, p.bytes, kBytes, p.peer, comm_, stream_), "ncclRecv");
      }
    }
  }
  // Point-to-point callers read the bytes on return (the interface's wait semantics).
  cuda::check(cuda::api().cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

bool NcclTransport::native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) {
  return allreduce_scaled(input, output, count, dtype, op, 1.0);
}

bool NcclTransport::allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                     double scale) {
  if (!can_reduce(dtype, op, scale)) return false;
  bool created = false;
  const nccl::RedOp red = reduction(dtype, op, scale, &created);
  const nccl::Result r = nccl::api().ncclAllReduce(input, output, count, nccl_type(dtype), red, comm_, stream_);
  // An op may be destroyed as soon as the last call given it has returned (NCCL's rule).
  if (created) nccl::api().ncclRedOpDestroy(red, comm_);
  nccl::check(r, "ncclAllReduce");
  return true;
}

bool NcclTransport::native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts,
                                          DataType dtype, ReduceOp op) {
  return reduce_scatter_scaled(input, output, counts, dtype, op, 1.0);
}

bool NcclTransport::reduce_scatter_scaled(const void* input, void* output, const std::vector<size_t>& counts,
                                          DataType dtype, ReduceOp op, double scale) {
  // `output` must not overlap `input`: rank r's share lands at the start of its output.
  if (!can_reduce(dtype, op, scale)) return false;
  bool created = false;
  const nccl::RedOp red = reduction(dtype, op, scale, &created);
  nccl::Result r = nccl::kSuccess;
  if (all_equal(counts)) {
    r = nccl::api().ncclReduceScatter(input, output, counts.front(), nccl_type(dtype), red, comm_, stream_);
  } else {
    // Uneven shares: one reduce per rank to that rank, issued as one group.
    const std::vector<size_t> at = offsets(counts);
    const size_t esize = dtype_size(dtype);
    nccl::api().ncclGroupStart();
    for (int root = 0; root < size() && r == nccl::kSuccess; ++root) {
      r = nccl::api().ncclReduce(static_cast<const char*>(input) + at[root] * esize, output, counts[root],
                                 nccl_type(dtype), red, root, comm_, stream_);
    }
    const nccl::Result ended = nccl::api().ncclGroupEnd();
    if (r == nccl::kSuccess) r = ended;
  }
  if (created) nccl::api().ncclRedOpDestroy(red, comm_);
  nccl::check(r, "NCCL reduce-scatter");
  return true;
}

void NcclTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  if (all_equal(byte_counts)) {
    nccl::check(nccl::api().ncclAllGather(mine, output, byte_counts.front(), kBytes, comm_, stream_), "ncclAllGather");
    return;
  }
  // Ragged: each rank broadcasts its block into place (what Horovod does over NCCL).
  const std::vector<size_t> at = offsets(byte_counts);
  Group group;
  for (int r = 0; r < size(); ++r) {
    nccl::check(nccl::api().ncclBroadcast(r == rank() ? mine : nullptr, static_cast<char*>(output) + at[r],
                                          byte_counts[r], kBytes, r, comm_, stream_),
                "ncclBroadcast");
  }
}

void NcclTransport::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                              const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = offsets(send_bytes), recv_at = offsets(recv_bytes);
  Group group;
  for (int r = 0; r < size(); ++r) {
    nccl::check(nccl::api().ncclSend(static_cast<const char*>(input) + send_at[r], send_bytes[r], kBytes, r, comm_,
                                     stream_),
                "ncclSend");
    nccl::check(nccl::api().ncclRecv(static_cast<char*>(output) + recv_at[r], recv_bytes[r], kBytes, r, comm_, stream_),
                "ncclRecv");
  }
}

void NcclTransport::broadcast(void* buf, size_t bytes, int root) {
  nccl::check(nccl::api().ncclBroadcast(buf, buf, bytes, kBytes, root, comm_, stream_), "ncclBroadcast");
}

void NcclTransport::gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) {
  const std::vector<size_t> at = offsets(byte_counts);
  Group group;
  nccl::check(nccl::api().ncclSend(mine, byte_counts[rank()], kBytes, root, comm_, stream_), "ncclSend");
  if (rank() != root) return;
  for (int r = 0; r < size(); ++r) {
    nccl::check(nccl::api().ncclRecv(static_cast<char*>(output) + at[r], byte_counts[r], kBytes, r, comm_, stream_),
                "ncclRecv");
  }
}

void NcclTransport::scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) {
  const std::vector<size_t> at = offsets(byte_counts);
  Group group;
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) {
      nccl::check(nccl::api().ncclSend(static_cast<const char*>(input) + at[r], byte_counts[r], kBytes, r, comm_,
                                       stream_),
                  "ncclSend");
    }
  }
  nccl::check(nccl::api().ncclRecv(mine, byte_counts[rank()], kBytes, root, comm_, stream_), "ncclRecv");
}

bool NcclTransport::native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                  int root) {
  return reduce_scaled(input, output, count, dtype, op, root, 1.0);
}

bool NcclTransport::reduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                  int root, double scale) {
  if (!can_reduce(dtype, op, scale)) return false;
  bool created = false;
  const nccl::RedOp red = reduction(dtype, op, scale, &created);
  const nccl::Result r = nccl::api().ncclReduce(input, output, count, nccl_type(dtype), red, root, comm_, stream_);
  if (created) nccl::api().ncclRedOpDestroy(red, comm_);
  nccl::check(r, "ncclReduce");
  return true;
}

std::unique_ptr<Transport> NcclTransport::split(const std::vector<int>& members) {
  throw Error("an NCCL transport is not split: each process set builds its own from its MPI transport");
}

}  // namespace horo
