#include "gpu/gpu_executor.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "collectives/ring.h"
#include "common/error.h"
#include "engine/collective_shapes.h"
#include "gpu/collective_outcome.h"
#include "gpu/cuda_loader.h"
#include "gpu/nccl_loader.h"

namespace horo {

namespace {

// Bytes the collective writes to a caller-provided output on this rank.
size_t output_bytes(const Request& q, int size, int rank) {
  const size_t esize = dtype_size(q.dtype);
  switch (q.type) {
    case CollectiveType::kReducescatter:
    case CollectiveType::kScatter:
      return rank_elements(q.shape, size, rank) * esize;
    default:
      return elements(q.shape) * esize;
  }
}

// This rank's GPU, as "host/PCI bus id": two ranks with the same one share a GPU, which NCCL refuses.
std::string gpu_identity(int device) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char bus[64] = {0};
  cuda::check(cuda::api().cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device), "cudaDeviceGetPCIBusId");
  return std::string(host) + "/" + bus;
}

}  // namespace

GpuExecutor::~GpuExecutor() {
  // Buffers ordered on stream_ go before it does.
  fusion_.release();
  scratch_.release();
  if (stream_ != nullptr && !nccl_) {
    cuda::DeviceGuard on(device_);
    cuda::api().cudaStreamSynchronize(stream_);
    cuda::api().cudaStreamDestroy(stream_);
  }
}

void GpuExecutor::choose(int device) {
  // Every member reports (mode, NCCL loads?, which GPU); rank 0 decides for all, so the
  // choice agrees even where machines differ, and a refusal is one message everywhere.
  std::string nccl_why;
  const bool nccl_loads = nccl::try_api(&nccl_why) != nullptr;
  std::string gpu;
  try {
    // A joined rank holds no GPU tensor: it cannot take part, and says so (all ranks then refuse this group).
    gpu = device < 0 ? "!a rank that has joined holds no GPU tensor to choose the set's GPU transport with"
                     : gpu_identity(device);
  } catch (const Error& e) {
    gpu = std::string("?") + e.what();
  }
  const std::string mine = tunables_.gpu_transport + "\n" + (nccl_loads ? "" : nccl_why) + "\n" + gpu;
  std::vector<std::string> all = control_.gather_bytes(mine, 0);
  std::string verdict;  // "nccl", "mpi", or "!" + why neither can serve
  if (control_.rank() == 0) {
    std::string mode, no_nccl, shared;
    std::set<std::string> gpus;
    for (size_t r = 0; r < all.size(); ++r) {
      const size_t a = all[r].find('\n'), b = all[r].find('\n', a + 1);
      const std::string rank_mode = all[r].substr(0, a), why = all[r].substr(a + 1, b - a - 1);
      const std::string rank_gpu = all[r].substr(b + 1);
      if (r == 0) mode = rank_mode;
      if (rank_mode != mode) {
        verdict = "!HORO_GPU_TRANSPORT differs across ranks (rank 0 " + mode + ", rank " + std::to_string(r) + " " +
                  rank_mode + ")";
      }
      if (!why.empty() && no_nccl.empty()) no_nccl = "rank " + std::to_string(r) + ": " + why;
      if (!rank_gpu.empty() && rank_gpu[0] == '!') verdict = "?" + rank_gpu.substr(1);
      if (!rank_gpu.empty() && rank_gpu[0] == '?' && no_nccl.empty()) {
        no_nccl = "rank " + std::to_string(r) + ": " + rank_gpu.substr(1);
      }
      if (!gpus.insert(rank_gpu).second && shared.empty()) {
        shared = "ranks share the GPU " + rank_gpu + ", which NCCL does not allow";
      }
    }
    if (verdict.empty()) {
      const std::string nccl_refusal = !no_nccl.empty() ? no_nccl : shared;
      if (mode == "mpi") {
        verdict = "mpi";
      } else if (nccl_refusal.empty()) {
        verdict = "nccl";
      } else if (mode == "auto") {
        verdict = "mpi";
      } else {
        verdict = "!HORO_GPU_TRANSPORT=nccl, but NCCL cannot serve: " + nccl_refusal;
      }
    }
  }
  control_.broadcast_bytes(verdict, 0);
  if (verdict[0] == '?') throw Error(verdict.substr(1));  // not remembered: a later group may choose
  device_ = device;
  if (verdict[0] == '!') {
    refusal_ = verdict.substr(1);
    return;
  }
  chosen_ = verdict;
  if (chosen_ == "nccl") {
    try {
      nccl_ = std::make_unique<NcclTransport>(control_, device, tunables_.nccl_timeout_seconds);
    } catch (const Error& e) {
      // Every rank threw the same (collective_outcome.h): remembered, so no rank retries alone.
      refusal_ = e.what();
      throw;
    }
    stream_ = nccl_->stream();
  } else {
    cuda::DeviceGuard on(device);
    cuda::check(cuda::api().cudaStreamCreateWithFlags(&stream_, cuda::kStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
}

void GpuExecutor::run(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  int device = -1;
  for (const auto& e : entries) {
    if (e.device >= 0) device = e.device;  // stand-ins of a joined rank have none
  }
  if (chosen_.empty() && refusal_.empty()) choose(device);
  if (!refusal_.empty()) throw Error(refusal_);
  if (nccl_) {
    // NCCL reports a failed or hung collective only when asked: every group first agrees that
    // no rank's communicator has one, so all ranks raise for the same group, naming it.
    try {
      agree_outcome(control_, nccl_->in_flight_failure(), "an earlier NCCL collective of this process set");
    } catch (const Error& e) {
      nccl_->abort(e.what());  // the peers of a healthy rank are gone: its queued work would hang
      refusal_ = std::string(e.what()) + "; GPU collectives on this process set are refused from now on";
      throw Error(refusal_);
    }
  }
  // Every rank must issue the same NCCL calls, so nothing here may fail on one rank alone:
  // a tensor on another GPU of this rank is copied (peer copy) through this GPU's buffers instead.
  cuda::DeviceGuard on(device_);
  for (auto& e : entries) {
    if (e.ready) e.ready->make_wait(stream_);  // read nothing before its producer has written it
    e.ready.reset();
  }
  if (chosen_ == "mpi" || !through_nccl(group, entries)) {
    staged(group, entries);
  }
  finish(entries);
}

bool GpuExecutor::through_nccl(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const bool reduces = spec.type == CollectiveType::kAllreduce || spec.type == CollectiveType::kReducescatter ||
                       spec.type == CollectiveType::kReduce;
  if (reduces && !NcclTransport::can_reduce(spec.dtype, spec.op, spec.prescale * spec.postscale)) return false;
  const bool single = spec.type == CollectiveType::kAlltoall || spec.type == CollectiveType::kGather ||
                      spec.type == CollectiveType::kScatter || spec.type == CollectiveType::kReduce;
  if (single && entries.front().device != device_) {
    // The unfused collectives hand NCCL the tensor itself: one on another GPU goes through scratch here.
    return on_this_device(group, entries.front());
  }
  switch (spec.type) {
    case CollectiveType::kAllreduce: allreduce(entries); break;
    case CollectiveType::kBroadcast: broadcast(entries); break;
    case CollectiveType::kAllgather: allgather(group, entries); break;
    case CollectiveType::kReducescatter: reducescatter(entries); break;
    case CollectiveType::kAlltoall: alltoall(group.front(), entries.front()); break;
    case CollectiveType::kGather: gather(group.front(), entries.front()); break;
    case CollectiveType::kScatter: scatter(entries.front()); break;
    case CollectiveType::kReduce: reduce_to_root(entries.front()); break;
    default: throw Error(std::string(collective_name(spec.type)) + " has no GPU form");
  }
  return true;
}

bool GpuExecutor::on_this_device(const std::vector<Response>& group, TensorEntry& e) {
  const int n = control_.size(), me = control_.rank();
  const size_t in_bytes = elements(e.request.shape) * dtype_size(e.request.dtype);
  const size_t out_bytes = e.output ? output_bytes(e.request, n, me) : 0;
  char* scratch = scratch_.reserve(in_bytes + out_bytes, device_, stream_);
  TensorEntry local;
  local.request = e.request;
  local.device = device_;
  local.input = scratch;
  local.output = e.output ? scratch + in_bytes : nullptr;
  copy(scratch, e.input, in_bytes);
  std::vector<TensorEntry> one;
  one.push_back(std::move(local));
  const bool done = through_nccl(group, one);
  if (e.output) copy(e.output, one.front().output, out_bytes);
  e.allocated = std::move(one.front().allocated);
  return done;
}

void GpuExecutor::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // cudaMemcpyDefault: unified addressing tells device memory from a joined rank's host stand-in.
  cuda::check(cuda::api().cudaMemcpyAsync(dst, src, bytes, cuda::kMemcpyDefault, stream_), "cudaMemcpyAsync");
}

std::shared_ptr<DeviceMemory> GpuExecutor::device_memory(size_t bytes) {
  return std::make_shared<DeviceMemory>(device_, stream_, bytes);
}

void GpuExecutor::allreduce(std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const size_t esize = dtype_size(spec.dtype);
  const double scale = spec.prescale * spec.postscale;  // folded into the reduction (PreMulSum)
  if (entries.size() == 1 && entries.front().device == device_) {
    TensorEntry& e = entries.front();
    const int64_t t = timeline_.activity_start();
    nccl_->allreduce_scaled(e.input, e.output, elements(e.request.shape), spec.dtype, spec.op, scale);
    timeline_.activity("NCCL_ALLREDUCE", t);
    return;
  }
  const size_t total = total_elements(entries);
  int64_t t = timeline_.activity_start();
  char* buf = fusion_.reserve(total * esize, device_, stream_);
  pack(entries, buf, copier(esize));
  timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  t = timeline_.activity_start();
  nccl_->allreduce_scaled(buf, buf, total, spec.dtype, spec.op, scale);
  timeline_.activity("NCCL_ALLREDUCE", t);
  t = timeline_.activity_start();
  unpack(entries, buf, copier(esize));
  timeline_.activity("MEMCPY_OUT_FUSION_BUFFER", t);
}

void GpuExecutor::broadcast(std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const size_t esize = dtype_size(spec.dtype);
  const bool root = control_.rank() == spec.root;
  if (entries.size() == 1 && entries.front().device == device_) {
    TensorEntry& e = entries.front();
    const size_t bytes = elements(e.request.shape) * esize;
    if (root) copy(e.output, e.input, bytes);
    const int64_t t = timeline_.activity_start();
    nccl_->broadcast(e.output, bytes, spec.root);
    timeline_.activity("NCCL_BCAST", t);
    return;
  }
  const size_t total = total_elements(entries) * esize;
  char* buf = fusion_.reserve(total, device_, stream_);
  if (root) pack(entries, buf, copier(esize));
  int64_t t = timeline_.activity_start();
  nccl_->broadcast(buf, total, spec.root);
  timeline_.activity("NCCL_BCAST", t);
  unpack(entries, buf, copier(esize));
}

void GpuExecutor::allgather(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  const size_t esize = dtype_size(entries.front().request.dtype);
  const int n = control_.size(), me = control_.rank();
  std::vector<size_t> block, block_bytes;
  allgather_blocks(group, entries, n, block);
  const RingLayout layout = RingLayout::from_counts(block);
  to_bytes(layout.count, esize, block_bytes);
  for (size_t k = 0; k < entries.size(); ++k) {
    auto out = std::make_shared<AllocatedOutput>();
    out->device_bytes = device_memory(gathered_output(entries[k].request, group[k].per_rank, n, *out));
    entries[k].allocated = std::move(out);
  }
  const int64_t t = timeline_.activity_start();
  if (entries.size() == 1 && entries.front().device == device_) {
    nccl_->native_allgatherv(entries.front().input, entries.front().allocated->device_bytes->data(), block_bytes);
    timeline_.activity("NCCL_ALLGATHER", t);
    return;
  }
  char* buf = fusion_.reserve(layout.total() * esize, device_, stream_);
  pack(entries, buf + layout.offset[me] * esize, copier(esize));
  nccl_->native_allgatherv(buf + layout.offset[me] * esize, buf, block_bytes);
  unpack_blocks(group, entries, layout.offset, buf,
                [&](size_t k) { return entries[k].allocated->device_bytes->data(); }, copier(esize));
  timeline_.activity("NCCL_ALLGATHER", t);
}

void GpuExecutor::reducescatter(std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const size_t esize = dtype_size(spec.dtype);
  const int n = control_.size(), me = control_.rank();
  std::vector<size_t> segment, cursor;
  reducescatter_segments(entries, n, segment);
  const RingLayout layout = RingLayout::from_counts(segment);
  int64_t t = timeline_.activity_start();
  char* buf = fusion_.reserve(layout.total() * esize, device_, stream_);
  pack_segments(entries, n, layout.offset, buf, copier(esize), cursor);
  timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  // NCCL's reduce-scatter may not write over its own input: this rank's share lands in scratch.
  char* mine = scratch_.reserve(segment[me] * esize, device_, stream_);
  t = timeline_.activity_start();
  nccl_->reduce_scatter_scaled(buf, mine, segment, spec.dtype, spec.op, spec.prescale * spec.postscale);
  timeline_.activity("NCCL_REDUCESCATTER", t);
  unpack_own_rows(entries, n, me, mine, copier(esize));
}

void GpuExecutor::alltoall(const Response& agreed, TensorEntry& e) {
  const int n = control_.size(), me = control_.rank();
  std::vector<size_t> send_bytes, recv_bytes;
  auto out = std::make_shared<AllocatedOutput>();
  out->device_bytes = device_memory(alltoall_output(e.request, agreed.per_rank, n, me, send_bytes, recv_bytes, *out));
  e.allocated = std::move(out);
  const int64_t t = timeline_.activity_start();
  nccl_->alltoallv(e.input, send_bytes, e.allocated->device_bytes->data(), recv_bytes);
  timeline_.activity("NCCL_ALLTOALLV", t);
}

void GpuExecutor::gather(const Response& agreed, TensorEntry& e) {
  const int n = control_.size();
  std::vector<size_t> bytes;
  gatherv_bytes(e.request, agreed.per_rank, n, bytes);
  char* output = nullptr;
  if (control_.rank() == e.request.root) {
    auto out = std::make_shared<AllocatedOutput>();
    out->device_bytes = device_memory(gathered_output(e.request, agreed.per_rank, n, *out));
    output = out->device_bytes->data();
    e.allocated = std::move(out);
  }
  const int64_t t = timeline_.activity_start();
  nccl_->gatherv(e.input, output, bytes, e.request.root);
  timeline_.activity("NCCL_GATHERV", t);
}

void GpuExecutor::scatter(TensorEntry& e) {
  std::vector<size_t> bytes;
  scatterv_bytes(e.request, control_.size(), bytes);
  const int64_t t = timeline_.activity_start();
  nccl_->scatterv(e.input, bytes, e.output, e.request.root);
  timeline_.activity("NCCL_SCATTERV", t);
}

void GpuExecutor::reduce_to_root(TensorEntry& e) {
  const Request& spec = e.request;
  const int64_t t = timeline_.activity_start();
  nccl_->reduce_scaled(e.input, e.output, elements(spec.shape), spec.dtype, spec.op, spec.root,
                       spec.prescale * spec.postscale);
  timeline_.activity("NCCL_REDUCE", t);
}

void GpuExecutor::staged(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  const int n = control_.size(), me = control_.rank();
  if (entries.front().request.type == CollectiveType::kAllreduce) {
    size_t bytes = 0;
    for (const auto& e : entries) bytes += elements(e.request.shape) * dtype_size(e.request.dtype);
    if (bytes > 2 * kStagingChunkBytes) return staged_allreduce_pipelined(group.front(), entries);
  }
  // One pinned arena: every input, then every output, each at its own offset.
  std::vector<size_t> in_bytes, out_bytes;
  size_t total = 0;
  for (const auto& e : entries) {
    in_bytes.push_back(e.input ? elements(e.request.shape) * dtype_size(e.request.dtype) : 0);
    out_bytes.push_back(e.output ? output_bytes(e.request, n, me) : 0);
    total += in_bytes.back() + out_bytes.back();
  }
  int64_t t = timeline_.activity_start();
  char* pinned = pinned_.reserve(total);
  std::vector<TensorEntry> host(entries.size());
  size_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    host[i].request = entries[i].request;
    host[i].request.memory = Memory::kHost;
    host[i].handle = entries[i].handle;
    if (entries[i].input) {
      copy(pinned + offset, entries[i].input, in_bytes[i]);
      host[i].input = pinned + offset;
      offset += in_bytes[i];
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].output == nullptr) continue;
    // In place stays in place: the CPU executor may rely on output == input.
    host[i].output = entries[i].output == entries[i].input ? const_cast<void*>(host[i].input) : pinned + offset;
    offset += out_bytes[i];
  }
  cuda::check(cuda::api().cudaStreamSynchronize(stream_), "cudaStreamSynchronize (staging to host)");
  timeline_.activity("MEMCPY_DEVICE_TO_HOST", t);
  host_.run(group, host);
  t = timeline_.activity_start();
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry& e = entries[i];
    if (e.output) copy(e.output, host[i].output, out_bytes[i]);
    if (host[i].allocated) {
      auto& from = *host[i].allocated;
      auto out = std::make_shared<AllocatedOutput>();
      out->shape = from.shape;
      out->received_splits = from.received_splits;
      out->value = from.value;
      out->device_bytes = device_memory(from.bytes.size());
      copy(out->device_bytes->data(), from.bytes.data(), from.bytes.size());
      e.allocated = std::move(out);
    }
  }
  // The pinned arena and the host outputs are reused or freed once this returns.
  cuda::check(cuda::api().cudaStreamSynchronize(stream_), "cudaStreamSynchronize (staging to device)");
  timeline_.activity("MEMCPY_HOST_TO_DEVICE", t);
}

void GpuExecutor::staged_allreduce_pipelined(const Response& agreed, std::vector<TensorEntry>& entries) {
  // Chunk k+1 travels device-to-host on the stream while the host reduces chunk k over MPI;
  // one stream keeps each chunk's copy back ahead of the copy that reuses its pinned half.
  // Every rank cuts the same chunks (from the agreed sizes), so the collectives match.
  // A fused group is packed into the device fusion buffer first (copies on the stream, no host
  // round trip) and pipelined as one tensor: the group shares dtype, op and scales.
  const size_t esize = dtype_size(entries.front().request.dtype);
  const size_t total = total_elements(entries);
  const int64_t t = timeline_.activity_start();
  const char* input = static_cast<const char*>(entries.front().input);
  char* output = static_cast<char*>(entries.front().output);
  if (entries.size() > 1) {
    char* packed = fusion_.reserve(total * esize, device_, stream_);
    pack(entries, packed, copier(esize));
    input = output = packed;
  }
  const size_t chunk = std::max<size_t>(1, kStagingChunkBytes / esize);
  const size_t chunks = (total + chunk - 1) / chunk;
  char* pinned = pinned_.reserve(2 * chunk * esize);
  std::vector<std::unique_ptr<CudaEvent>> arrived(chunks);
  auto fetch = [&](size_t k) {
    const size_t count = std::min(chunk, total - k * chunk);
    copy(pinned + (k % 2) * chunk * esize, input + k * chunk * esize, count * esize);
    arrived[k] = std::make_unique<CudaEvent>(device_, stream_);
  };
  fetch(0);
  for (size_t k = 0; k < chunks; ++k) {
    if (k + 1 < chunks) fetch(k + 1);
    arrived[k]->synchronize();
    const size_t count = std::min(chunk, total - k * chunk);
    std::vector<Response> one{agreed};
    one.front().request.shape = {static_cast<int64_t>(count)};
    one.front().request.memory = Memory::kHost;
    std::vector<TensorEntry> host(1);
    host.front().request = one.front().request;
    host.front().input = host.front().output = pinned + (k % 2) * chunk * esize;
    host_.run(one, host);
    copy(output + k * chunk * esize, host.front().output, count * esize);
  }
  if (entries.size() > 1) unpack(entries, output, copier(esize));
  cuda::check(cuda::api().cudaStreamSynchronize(stream_), "cudaStreamSynchronize (staging to device)");
  timeline_.activity("STAGED_PIPELINE", t);
}

void GpuExecutor::finish(std::vector<TensorEntry>& entries) {
  auto done = std::make_shared<CudaEvent>(device_, stream_);
  std::string names;
  for (auto& e : entries) {
    if (!e.allocated) e.allocated = std::make_shared<AllocatedOutput>();
    e.allocated->done = done;
    names += (names.empty() ? "'" : ", '") + e.request.name + "'";
  }
  if (nccl_) nccl_->watch(done, names);
}

}  // namespace horo
