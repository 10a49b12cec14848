#include "transport/nccl_transport.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "gpu/collective_outcome.h"
#include "gpu/cuda_loader.h"
#include "gpu/nccl_loader.h"
#include "gpu/nccl_wait.h"
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
    case DataType::kInt16:
    case DataType::kBool: break;  // NCCL has no such type: can_reduce() sends these through MPI staging
  }
  throw Error(std::string("NCCL cannot reduce ") + dtype_name(dtype));
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

}  // namespace

// ncclGroupStart/End around a batch of calls, ended even when one throws; on a
// non-blocking communicator the group's end is where the batch settles.
class NcclGroup {
 public:
  explicit NcclGroup(NcclTransport& transport) : transport_(transport) {
    nccl::check(nccl::api().ncclGroupStart(), "ncclGroupStart");
  }
  ~NcclGroup() noexcept(false) {
    const nccl::Result r = nccl::api().ncclGroupEnd();
    if (std::uncaught_exceptions() == 0) transport_.settle(r, "ncclGroupEnd");
  }

 private:
  NcclTransport& transport_;
};

namespace {

// Polls a non-blocking communicator's own state: kInProgress until its pending work is set up.
nccl::Result async_state(nccl::Comm comm) {
  nccl::Result state = nccl::kSuccess;
  const nccl::Result asked = nccl::api().ncclCommGetAsyncError(comm, &state);
  return asked == nccl::kSuccess ? state : asked;
}

std::string nccl_error(nccl::Result r) {
  return std::string(nccl::api().ncclGetErrorString(r)) + " (NCCL error " + std::to_string(static_cast<int>(r)) + ")";
}

std::string timeout_text(double seconds) {
  return "not finished after " + std::to_string(static_cast<long long>(seconds)) +
         " s (HORO_NCCL_TIMEOUT_SECONDS), presumed hung";
}

}  // namespace

NcclTransport::NcclTransport(Transport& control, int device, double timeout_seconds)
    : control_(control), device_(device), timeout_seconds_(timeout_seconds) {
  // Step 1, local: the stream, and on rank 0 the unique id. Agreed before anyone joins:
  // a rank missing from the communicator's creation would leave the others waiting in it.
  std::string failure, id_bytes;
  try {
    cuda::DeviceGuard on(device);
    const nccl::Api& api = nccl::api();
    cuda::check(cuda::api().cudaStreamCreateWithFlags(&stream_, cuda::kStreamNonBlocking),
                "cudaStreamCreateWithFlags");
    if (rank() == 0) {
      nccl::UniqueId id;
      nccl::check(api.ncclGetUniqueId(&id), "ncclGetUniqueId");
      id_bytes.assign(id.internal, sizeof id.internal);
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  control_.broadcast_bytes(id_bytes, 0);
  try {
    agree_outcome(control_, failure, "preparing the NCCL communicator");
    // Step 2, together: every rank joins, each wait bounded; then all agree on the outcome.
    failure = join(id_bytes);
    agree_outcome(control_, failure, "creating the NCCL communicator (ncclCommInitRankConfig)");
  } catch (const Error& e) {
    abort(e.what());  // a rank that did join leaves nothing behind
    if (stream_ != nullptr) cuda::api().cudaStreamDestroy(stream_);
    throw;
  }
}

std::string NcclTransport::join(const std::string& id_bytes) {
  try {
    cuda::DeviceGuard on(device_);
    const nccl::Api& api = nccl::api();
    nccl::UniqueId id;
    std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
    nccl::Config config;
    config.blocking = 0;  // returns at once; the wait below is ours, bounded and polled
    const nccl::Result r = api.ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    if (r != nccl::kSuccess && r != nccl::kInProgress) {
      abort("ncclCommInitRankConfig failed");
      return "ncclCommInitRankConfig: " + nccl_error(r);
    }
    nccl::Result state = r;
    const WaitVerdict verdict = wait_in_slices(
        [&] {
          state = async_state(comm_);
          return WaitProbe{state == nccl::kSuccess, state};
        },
        timeout_seconds_);
    if (verdict == WaitVerdict::kDone) return "";
    const std::string why = verdict == WaitVerdict::kFailed ? "ncclCommInitRankConfig: " + nccl_error(state)
                                                            : "ncclCommInitRankConfig " + timeout_text(timeout_seconds_);
    abort(why);
    return why;
  } catch (const Error& e) {
    abort(e.what());
    return e.what();
  }
}

NcclTransport::~NcclTransport() {
  try {
    cuda::DeviceGuard on(device_);
    // Queued work finishes first (or is aborted past the deadline); then the communicator, then its stream.
    if (comm_ != nullptr) wait_for_stream("finishing the work queued before shutdown");
    if (comm_ != nullptr) nccl::api().ncclCommDestroy(comm_);
  } catch (const Error&) {
    // wait_for_stream aborted the communicator; nobody is left to tell.
  }
  cuda::api().cudaStreamDestroy(stream_);
}

nccl::Comm NcclTransport::comm() const {
  if (comm_ == nullptr) throw Error("the NCCL communicator was aborted: " + aborted_);
  return comm_;
}

void NcclTransport::abort(const std::string& why) {
  if (comm_ == nullptr) return;
  // Kills the communicator's kernels too: streams waiting on them move on.
  nccl::api().ncclCommAbort(comm_);
  comm_ = nullptr;
  aborted_ = why;
}

void NcclTransport::settle(nccl::Result result, const char* what) {
  if (result == nccl::kInProgress) {
    const nccl::Comm c = comm();
    nccl::Result state = result;
    const WaitVerdict verdict = wait_in_slices(
        [&] {
          state = async_state(c);
          return WaitProbe{state == nccl::kSuccess, state};
        },
        timeout_seconds_);
    if (verdict != WaitVerdict::kDone) {
      const std::string why = std::string(what) + (verdict == WaitVerdict::kFailed ? " failed: " + nccl_error(state)
                                                                                  : " " + timeout_text(timeout_seconds_));
      abort(why);  // an asynchronous error leaves the communicator unusable
      throw Error(why);
    }
    return;
  }
  nccl::check(result, what);
}

void NcclTransport::queued(nccl::Result result, const char* what) {
  if (result != nccl::kInProgress) nccl::check(result, what);
}

void NcclTransport::wait_for_stream(const char* what) {
  const CudaEvent done(device_, stream_);
  const nccl::Comm c = comm();
  nccl::Result state = nccl::kSuccess;
  const WaitVerdict verdict = wait_in_slices(
      [&] {
        state = async_state(c);
        return WaitProbe{done.query(), state};
      },
      timeout_seconds_);
  if (verdict == WaitVerdict::kDone) return;
  const std::string why = std::string(what) + (verdict == WaitVerdict::kFailed ? ": NCCL reported " + nccl_error(state)
                                                                              : ": " + timeout_text(timeout_seconds_));
  abort(why);
  throw Error(why + "; the NCCL communicator was aborted");
}

void NcclTransport::watch(CudaEventPtr done, std::string names) {
  in_flight_.push_back({std::move(done), std::move(names), std::chrono::steady_clock::now()});
}

std::string NcclTransport::in_flight_failure() {
  if (comm_ == nullptr) return "the NCCL communicator was aborted: " + aborted_;
  try {
    while (!in_flight_.empty() && in_flight_.front().done->query()) in_flight_.pop_front();
  } catch (const Error& e) {
    abort(e.what());  // a CUDA error on the stream: its NCCL work cannot be trusted
    return e.what();
  }
  const nccl::Result state = async_state(comm_);
  const double age = in_flight_.empty() ? 0.0
                                        : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                                        in_flight_.front().since).count();
  const WaitVerdict verdict = wait_verdict(in_flight_.empty(), state, age, timeout_seconds_);
  if (verdict == WaitVerdict::kDone || verdict == WaitVerdict::kWait) return "";
  std::string names;
  for (size_t i = 0; i < in_flight_.size() && i < 8; ++i) names += (i ? ", " : "") + in_flight_[i].names;
  if (in_flight_.size() > 8) names += ", ...";
  const std::string why =
      (verdict == WaitVerdict::kFailed ? "NCCL reported " + nccl_error(state) : "NCCL work " + timeout_text(timeout_seconds_)) +
      (names.empty() ? std::string(" after the last GPU collective") : " while " + names + " ran") +
      "; the NCCL communicator was aborted";
  abort(why);
  in_flight_.clear();
  return why;
}

bool NcclTransport::can_reduce(DataType dtype, ReduceOp op, double scale) {
  if (op == ReduceOp::kAdasum || dtype == DataType::kInt16 || dtype == DataType::kBool) return false;
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
  settle(nccl::api().ncclRedOpCreatePreMulSum(&custom, scalar, nccl_type(dtype), nccl::kScalarHostImmediate, comm()),
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
    NcclGroup group(*this);
    for (const auto& p : batch) {
      if (p.send) {
        queued(nccl::api().ncclSend(p.buf, p.bytes, kBytes, p.peer, comm(), stream_), "ncclSend");
      } else {
        queued(nccl::api().ncclRecv(p.buf, p.bytes, kBytes, p.peer, comm(), stream_), "ncclRecv");
      }
    }
  }
  // Point-to-point callers read the bytes on return (the interface's wait semantics).
  wait_for_stream("NCCL point-to-point");
}

bool NcclTransport::native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) {
  return allreduce_scaled(input, output, count, dtype, op, 1.0);
}

bool NcclTransport::allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                     double scale) {
  if (!can_reduce(dtype, op, scale)) return false;
  bool created = false;
  const nccl::RedOp red = reduction(dtype, op, scale, &created);
  const nccl::Result r = nccl::api().ncclAllReduce(input, output, count, nccl_type(dtype), red, comm(), stream_);
  // An op may be destroyed once the last call given it has returned (NCCL's rule): on a
  // non-blocking communicator, once that call has settled.
  settle(r, "ncclAllReduce");
  if (created) nccl::api().ncclRedOpDestroy(red, comm());
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
    r = nccl::api().ncclReduceScatter(input, output, counts.front(), nccl_type(dtype), red, comm(), stream_);
  } else {
    // Uneven shares: one reduce per rank to that rank, issued as one group.
    const std::vector<size_t> at = offsets(counts);
    const size_t esize = dtype_size(dtype);
    nccl::api().ncclGroupStart();
    for (int root = 0; root < size() && (r == nccl::kSuccess || r == nccl::kInProgress); ++root) {
      r = nccl::api().ncclReduce(static_cast<const char*>(input) + at[root] * esize, output, counts[root],
                                 nccl_type(dtype), red, root, comm(), stream_);
    }
    const nccl::Result ended = nccl::api().ncclGroupEnd();
    if (r == nccl::kSuccess || r == nccl::kInProgress) r = ended;
  }
  settle(r, "NCCL reduce-scatter");
  if (created) nccl::api().ncclRedOpDestroy(red, comm());
  return true;
}

void NcclTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  if (all_equal(byte_counts)) {
    settle(nccl::api().ncclAllGather(mine, output, byte_counts.front(), kBytes, comm(), stream_), "ncclAllGather");
    return;
  }
  // Ragged: each rank broadcasts its block into place (what Horovod does over NCCL).
  const std::vector<size_t> at = offsets(byte_counts);
  NcclGroup group(*this);
  for (int r = 0; r < size(); ++r) {
    queued(nccl::api().ncclBroadcast(r == rank() ? mine : nullptr, static_cast<char*>(output) + at[r],
                                          byte_counts[r], kBytes, r, comm(), stream_),
                "ncclBroadcast");
  }
}

void NcclTransport::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                              const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = offsets(send_bytes), recv_at = offsets(recv_bytes);
  NcclGroup group(*this);
  for (int r = 0; r < size(); ++r) {
    queued(nccl::api().ncclSend(static_cast<const char*>(input) + send_at[r], send_bytes[r], kBytes, r, comm(),
                                     stream_),
                "ncclSend");
    queued(nccl::api().ncclRecv(static_cast<char*>(output) + recv_at[r], recv_bytes[r], kBytes, r, comm(), stream_),
                "ncclRecv");
  }
}

void NcclTransport::broadcast(void* buf, size_t bytes, int root) {
  settle(nccl::api().ncclBroadcast(buf, buf, bytes, kBytes, root, comm(), stream_), "ncclBroadcast");
}

void NcclTransport::gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) {
  const std::vector<size_t> at = offsets(byte_counts);
  NcclGroup group(*this);
  queued(nccl::api().ncclSend(mine, byte_counts[rank()], kBytes, root, comm(), stream_), "ncclSend");
  if (rank() != root) return;
  for (int r = 0; r < size(); ++r) {
    queued(nccl::api().ncclRecv(static_cast<char*>(output) + at[r], byte_counts[r], kBytes, r, comm(), stream_),
                "ncclRecv");
  }
}

void NcclTransport::scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) {
  const std::vector<size_t> at = offsets(byte_counts);
  NcclGroup group(*this);
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) {
      queued(nccl::api().ncclSend(static_cast<const char*>(input) + at[r], byte_counts[r], kBytes, r, comm(),
                                       stream_),
                  "ncclSend");
    }
  }
  queued(nccl::api().ncclRecv(mine, byte_counts[rank()], kBytes, root, comm(), stream_), "ncclRecv");
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
  const nccl::Result r = nccl::api().ncclReduce(input, output, count, nccl_type(dtype), red, root, comm(), stream_);
  settle(r, "ncclReduce");
  if (created) nccl::api().ncclRedOpDestroy(red, comm());
  return true;
}

std::unique_ptr<Transport> NcclTransport::split(const std::vector<int>& members) {
  throw Error("an NCCL transport is not split: each process set builds its own from its MPI transport");
}

}  // namespace horo
