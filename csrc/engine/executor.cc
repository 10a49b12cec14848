#include "engine/executor.h"

#include <cstring>

#include "collectives/adasum.h"
#include "common/copy_bytes.h"
#include "common/error.h"
#include "engine/collective_shapes.h"
#include "reduce/reduce_kernels.h"

namespace horo {

namespace {

// The copies collective_shapes.h makes: bytes as they are, or scaled by a factor on the way.
struct CopyBytes {
  size_t esize;
  void operator()(char* to, const char* from, size_t count) const { copy_bytes(to, from, count * esize); }
};
struct CopyScaled {
  DataType dtype;
  double factor;
  void operator()(char* to, const char* from, size_t count) const { copy_scaled(dtype, to, from, count, factor); }
};

double final_scale(const Request& spec, int size) {
  return spec.op == ReduceOp::kAverage ? spec.postscale / size : spec.postscale;
}

// Adasum keeps each tensor's own coefficients, so a fused group is combined in the
// fusion buffer with its tensor boundaries (collectives/adasum.h). Checked here, where
// every rank of the set runs the same group: a refusal is the same error on each.
void adasum_allreduce(Transport& transport, FusionBuffer& fusion, std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const std::string why = AdasumAllreduce::unsupported(transport.size(), spec.dtype);
  if (!why.empty()) throw Error(why);
  const size_t esize = dtype_size(spec.dtype);
  std::vector<size_t> counts;
  size_t total = 0;
  for (const auto& e : entries) total += counts.emplace_back(elements(e.request.shape));
  char* buf = entries.size() == 1 ? static_cast<char*>(entries.front().output) : fusion.reserve(total * esize);
  pack(entries, buf, CopyScaled{spec.dtype, spec.prescale});
  // Kept per thread (the engine's): its half-buffer stays allocated and faulted in from call to call.
  static thread_local AdasumAllreduce adasum;
  adasum.allreduce(transport, buf, counts, spec.dtype);
  if (entries.size() == 1) return scale_buffer(spec.dtype, buf, total, spec.postscale);
  unpack(entries, buf, CopyScaled{spec.dtype, spec.postscale});
}

void refuse_adasum(const Request& spec) {
  if (spec.op == ReduceOp::kAdasum) {
    throw Error(std::string("Adasum is an allreduce op; ") + collective_name(spec.type) + " takes Sum, Average, Min, "
                "Max or Product");
  }
}

}  // namespace

const char* Executor::native(const char* mpi_label, const char* shm_label) const {
  return shm_ ? shm_label : mpi_label;
}

bool Executor::ring_for(const std::string& algo, size_t bytes) const {
  if (algo == "auto" && transport_.prefers_native()) return false;
  return algo == "ring" || (algo == "auto" && static_cast<int64_t>(bytes) >= tunables_.ring_min_bytes);
}

void Executor::run(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  switch (group.front().request.type) {
    case CollectiveType::kAllreduce: return allreduce(entries, group.front().preloaded);
    case CollectiveType::kReducescatter: return reducescatter(entries, group.front().preloaded);
    case CollectiveType::kAllgather: return allgather(group, entries);
    case CollectiveType::kBroadcast: return broadcast(entries, group.front().preloaded);
    case CollectiveType::kAlltoall: return alltoall(group.front(), entries.front());
    case CollectiveType::kBarrier: {
      const int64_t t = timeline_.activity_start();
      transport_.barrier();
      return timeline_.activity(native("MPI_BARRIER", "SHM_BARRIER"), t);
    }
    case CollectiveType::kGather: return gather(group.front(), entries.front());
    case CollectiveType::kScatter: return scatter(entries.front(), group.front().preloaded);
    case CollectiveType::kReduce: return reduce_to_root(entries.front(), group.front().preloaded);
  }
}

void Executor::reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, double scale) {
  const int64_t t = timeline_.activity_start();
  const size_t bytes = count * dtype_size(dtype);
  const bool two_level = transport_.two_level_allreduce(bytes);
  if ((!two_level && ring_for(tunables_.allreduce_algo, bytes)) ||
      !transport_.native_allreduce_scaled(input, output, count, dtype, op, scale)) {
    ring_.allreduce(transport_, RingLayout::even(count, transport_.size()), input, output, dtype, op, scale);
    timeline_.activity("RING_ALLREDUCE", t);
  } else {
    timeline_.activity(two_level ? "HIERARCHICAL_ALLREDUCE" : native("MPI_ALLREDUCE", "SHM_ALLREDUCE"), t);
  }
}

void Executor::reduce_preloaded(void* output, size_t offset, size_t count, DataType dtype, ReduceOp op,
                                double scale, const char* label) {
  const int64_t t = timeline_.activity_start();
  const size_t esize = dtype_size(dtype), per_piece = ShmCapabilities::kPreloadPieceBytes / esize;
  // A piece at a time, as the peers' inputs come in (ShmCapabilities::await_preloaded).
  for (size_t done = 0; done < count; done += per_piece) {
    const size_t n = std::min(per_piece, count - done), at = (offset + done) * esize;
    for (int p = 0; p < transport_.size(); ++p) shm_->await_preloaded(p, at + n * esize);
    char* out = static_cast<char*>(output) + done * esize;
    reduce_to(dtype, op, out, shm_->preloaded(0) + at, shm_->preloaded(1) + at, n);
    for (int p = 2; p < transport_.size(); ++p) reduce_into(dtype, op, out, shm_->preloaded(p) + at, n);
    scale_buffer(dtype, out, n, scale);
  }
  timeline_.activity(label, t);
}

void Executor::allreduce(std::vector<TensorEntry>& entries, bool preloaded) {
  const Request& spec = entries.front().request;
  const DataType dtype = spec.dtype;
  const size_t esize = dtype_size(dtype);
  const double postscale = final_scale(spec, transport_.size());
  if (spec.op == ReduceOp::kAdasum) {
    const int64_t t = timeline_.activity_start();
    adasum_allreduce(transport_, fusion_, entries);
    return timeline_.activity("ADASUM_ALLREDUCE", t);
  }

  if (entries.size() == 1) {
    // No staging: the algorithm reads the input and writes the output directly.
    TensorEntry& e = entries.front();
    const size_t count = elements(e.request.shape);
    if (preloaded) return reduce_preloaded(e.output, 0, count, dtype, spec.op, postscale, "SHM_PRELOADED_ALLREDUCE");
    const void* input = e.input;
    if (spec.prescale != 1.0) {
      copy_scaled(dtype, e.output, e.input, count, spec.prescale);
      input = e.output;
    }
    reduce(input, e.output, count, dtype, spec.op, postscale);
    return;
  }
  const size_t total = total_elements(entries);
  int64_t t = timeline_.activity_start();
  char* buf = fusion_.reserve(total * esize);
  pack(entries, buf, CopyScaled{dtype, spec.prescale});
  timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  reduce(buf, buf, total, dtype, spec.op);
  t = timeline_.activity_start();
  unpack(entries, buf, CopyScaled{dtype, postscale});
  timeline_.activity("MEMCPY_OUT_FUSION_BUFFER", t);
}

void Executor::allocate_missing_output(TensorEntry& e, size_t rows, bool shared) {
  auto out = std::make_shared<AllocatedOutput>();
  out->shape = e.request.shape.empty() ? std::vector<int64_t>{1} : e.request.shape;
  out->shape[0] = static_cast<int64_t>(rows);
  const size_t bytes = elements(out->shape) * dtype_size(e.request.dtype);
  out->bytes.resize(bytes, shared ? shared_output_(bytes) : nullptr);
  e.output = out->bytes.data();
  e.allocated = std::move(out);
}

void Executor::reducescatter(std::vector<TensorEntry>& entries, bool preloaded) {
  const Request& spec = entries.front().request;
  const DataType dtype = spec.dtype;
  const size_t esize = dtype_size(dtype);
  const int n = transport_.size(), me = transport_.rank();
  refuse_adasum(spec);
  for (TensorEntry& e : entries) {  // the caller's output, as usual: nothing to work out
    if (!e.output) allocate_missing_output(e, rows_of_rank(first_dim(e.request.shape), n, me));
  }
  const double postscale = final_scale(spec, n);
  if (preloaded) {  // this rank's rows, straight from every rank's input
    const size_t rows = first_dim(spec.shape), row = row_elements(spec.shape);
    return reduce_preloaded(entries.front().output, rows_before_rank(rows, n, me) * row, rows_of_rank(rows, n, me) * row,
                            dtype, spec.op, postscale, "SHM_PRELOADED_REDUCE_SCATTER");
  }
  reducescatter_segments(entries, n, counts_);
  if (entries.size() == 1 && spec.prescale == 1.0) {
    // No staging: one tensor's rows are already laid out by receiving rank (two copies saved).
    TensorEntry& e = entries.front();
    const int64_t t = timeline_.activity_start();
    if (!ring_for(tunables_.reducescatter_algo, elements(spec.shape) * esize) &&
        transport_.native_reduce_scatter(e.input, e.output, counts_, dtype, spec.op)) {
      scale_buffer(dtype, e.output, counts_[me], postscale);
      return timeline_.activity(native("MPI_REDUCE_SCATTER", "SHM_REDUCE_SCATTER"), t);
    }
  }
  const RingLayout& layout = layout_;
  layout_.assign(counts_);
  int64_t t = timeline_.activity_start();
  char* buf = fusion_.reserve(layout.total() * esize);
  pack_segments(entries, n, layout.offset, buf, CopyScaled{dtype, spec.prescale}, cursor_);
  timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  // The ring leaves our segment in place; MPI's in-place reduce-scatter moves it to the front.
  size_t offset = 0;
  t = timeline_.activity_start();
  if (ring_for(tunables_.reducescatter_algo, layout.total() * esize) ||
      !transport_.native_reduce_scatter(buf, buf, layout.count, dtype, spec.op)) {
    ring_.reduce_scatter(transport_, layout, buf, buf, dtype, spec.op);
    offset = layout.offset[me];
    timeline_.activity("RING_REDUCESCATTER", t);
  } else {
    timeline_.activity(native("MPI_REDUCE_SCATTER", "SHM_REDUCE_SCATTER"), t);
  }
  t = timeline_.activity_start();
  unpack_own_rows(entries, n, me, buf + offset * esize, CopyScaled{dtype, postscale});
  timeline_.activity("MEMCPY_OUT_FUSION_BUFFER", t);
}

void Executor::allgather(const std::vector<Response>& group, std::vector<TensorEntry>& entries) {
  const DataType dtype = entries.front().request.dtype;
  const size_t esize = dtype_size(dtype);
  const int n = transport_.size(), me = transport_.rank();
  allgather_blocks(group, entries, n, counts_);
  const RingLayout& layout = layout_;
  layout_.assign(counts_);
  // One tensor gathers straight into its output; several go through the fusion buffer.
  const bool fused = entries.size() > 1;
  std::shared_ptr<char> located = located_output(group.front().preloaded);  // a preloaded tensor is alone
  const bool preloaded_inputs = group.front().preloaded && !located;
  for (size_t k = 0; k < entries.size(); ++k) {
    auto out = std::make_shared<AllocatedOutput>();
    const size_t bytes = gathered_output(entries[k].request, group[k].per_rank, n, *out);
    // Only where the peers write into it: one computed from preloaded inputs is this rank's alone.
    out->bytes.resize(bytes, located ? std::move(located) : fused || preloaded_inputs ? nullptr : shared_output_(bytes));
    entries[k].allocated = std::move(out);
  }
  if (preloaded_inputs) {  // one tensor: every rank's rows from its input
    const int64_t t = timeline_.activity_start();
    char* out = entries.front().allocated->bytes.data();
    for (int r = 0; r < n; ++r) {
      shm_->read_preloaded(r, 0, out + layout.offset[r] * esize, layout.count[r] * esize);
    }
    return timeline_.activity("SHM_PRELOADED_ALLGATHERV", t);
  }
  char* buf = fused ? fusion_.reserve(layout.total() * esize) : entries.front().allocated->bytes.data();
  const char* mine = static_cast<const char*>(entries.front().input);
  int64_t t = timeline_.activity_start();
  if (fused) {
    pack(entries, buf + layout.offset[me] * esize, CopyBytes{esize});
    mine = buf + layout.offset[me] * esize;
    timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  }
  // Measured (benchmarks/collectives_busbw.py): with two ranks the ring's one
  // step is just MPI's exchange in chunks, and loses; from three it wins.
  const bool two_level = transport_.two_level_allgather(layout.total() * esize);
  const bool ring = !two_level && (tunables_.allgather_algo == "ring" ||
                                   (transport_.size() > 2 && ring_for(tunables_.allgather_algo, layout.total() * esize)));
  t = timeline_.activity_start();
  if (ring) {
    ring_.allgather(transport_, layout, mine, buf, dtype);
    timeline_.activity("RING_ALLGATHER", t);
  } else {
    to_bytes(layout.count, esize, send_bytes_);
    transport_.native_allgatherv(mine, buf, send_bytes_);
    timeline_.activity(two_level ? "HIERARCHICAL_ALLGATHERV"
                                 : group.front().preloaded ? "SHM_PRELOCATED_ALLGATHERV"
                                                           : native("MPI_ALLGATHERV", "SHM_ALLGATHERV"),
                       t);
  }
  if (!fused) return;
  t = timeline_.activity_start();
  unpack_blocks(group, entries, layout.offset, buf, [&](size_t k) { return entries[k].allocated->bytes.data(); },
                CopyBytes{esize});
  timeline_.activity("MEMCPY_OUT_FUSION_BUFFER", t);
}

void Executor::broadcast(std::vector<TensorEntry>& entries, bool preloaded) {
  const Request& spec = entries.front().request;
  const size_t esize = dtype_size(spec.dtype);
  const bool root = transport_.rank() == spec.root;
  if (entries.size() == 1) {
    TensorEntry& e = entries.front();
    const size_t bytes = elements(e.request.shape) * esize;
    if (root && e.output != e.input) copy_bytes(e.output, e.input, bytes);
    const int64_t t = timeline_.activity_start();
    if (preloaded) {
      if (!root) shm_->read_preloaded(spec.root, 0, e.output, bytes);
      return timeline_.activity("SHM_PRELOADED_BCAST", t);
    }
    transport_.broadcast(e.output, bytes, spec.root);
    timeline_.activity(native("MPI_BCAST", "SHM_BCAST"), t);
    return;
  }
  const size_t total = total_elements(entries) * esize;
  int64_t t = timeline_.activity_start();
  char* buf = fusion_.reserve(total);
  if (root) pack(entries, buf, CopyBytes{esize});
  timeline_.activity("MEMCPY_IN_FUSION_BUFFER", t);
  t = timeline_.activity_start();
  transport_.broadcast(buf, total, spec.root);
  timeline_.activity(native("MPI_BCAST", "SHM_BCAST"), t);
  t = timeline_.activity_start();
  unpack(entries, buf, CopyBytes{esize});
  timeline_.activity("MEMCPY_OUT_FUSION_BUFFER", t);
}

void Executor::alltoall(const Response& agreed, TensorEntry& e) {
  const int n = transport_.size(), me = transport_.rank();
  const size_t row_bytes = row_elements(e.request.shape) * dtype_size(e.request.dtype);
  auto out = std::make_shared<AllocatedOutput>();
  const size_t bytes = alltoall_output(e.request, agreed.per_rank, n, me, send_bytes_, recv_bytes_, *out);
  std::shared_ptr<char> located = located_output(agreed.preloaded);
  const bool preloaded_inputs = agreed.preloaded && !located;
  out->bytes.resize(bytes, located ? std::move(located) : preloaded_inputs ? nullptr : shared_output_(bytes));
  const int64_t t = timeline_.activity_start();
  if (preloaded_inputs) {  // rank r's rows for this rank, from r's input
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      size_t from = 0;
      for (int j = 0; j < me; ++j) from += static_cast<size_t>(agreed.per_rank[r * n + j]) * row_bytes;
      shm_->read_preloaded(r, from, out->bytes.data() + at, recv_bytes_[r]);
      at += recv_bytes_[r];
    }
    timeline_.activity("SHM_PRELOADED_ALLTOALLV", t);
  } else {
    transport_.alltoallv(e.input, send_bytes_, out->bytes.data(), recv_bytes_);
    timeline_.activity(agreed.preloaded ? "SHM_PRELOCATED_ALLTOALLV" : native("MPI_ALLTOALLV", "SHM_ALLTOALLV"), t);
  }
  e.allocated = std::move(out);
}

void Executor::gather(const Response& agreed, TensorEntry& e) {
  const int n = transport_.size(), root = e.request.root;
  const std::vector<size_t>& bytes = send_bytes_;
  gatherv_bytes(e.request, agreed.per_rank, n, send_bytes_);
  char* output = nullptr;
  if (transport_.rank() == root) {
    auto out = std::make_shared<AllocatedOutput>();
    const size_t total = gathered_output(e.request, agreed.per_rank, n, *out);
    // Where the senders write into it; filled from preloaded inputs, it is this rank's alone.
    out->bytes.resize(total, agreed.preloaded ? nullptr : shared_output_(total));
    output = out->bytes.data();
    e.allocated = std::move(out);
  }
  const int64_t t = timeline_.activity_start();
  if (agreed.preloaded) {  // the root reads each sender's rows from its input; the senders are done
    size_t at = 0;
    for (int r = 0; r < n && transport_.rank() == root; at += bytes[r++]) {
      if (r == root) {
        copy_bytes(output + at, e.input, bytes[r]);
      } else {
        shm_->read_preloaded(r, 0, output + at, bytes[r]);
      }
    }
    return timeline_.activity("SHM_PRELOADED_GATHERV", t);
  }
  transport_.gatherv(e.input, output, bytes, root);
  timeline_.activity(native("MPI_GATHERV", "SHM_GATHERV"), t);
}

void Executor::scatter(TensorEntry& e, bool preloaded) {
  const int n = transport_.size(), me = transport_.rank();
  const size_t rows = first_dim(e.request.shape);
  if (!e.output) allocate_missing_output(e, rows_of_rank(rows, n, me), !preloaded);  // where the root may write into it
  const size_t row_bytes = row_elements(e.request.shape) * dtype_size(e.request.dtype);
  const int64_t t = timeline_.activity_start();
  if (preloaded) {  // this rank's rows, straight from the root's input
    shm_->read_preloaded(e.request.root, rows_before_rank(rows, n, me) * row_bytes, e.output,
                         rows_of_rank(rows, n, me) * row_bytes);
    return timeline_.activity("SHM_PRELOADED_SCATTERV", t);
  }
  scatterv_bytes(e.request, n, send_bytes_);
  transport_.scatterv(e.input, send_bytes_, e.output, e.request.root);
  timeline_.activity(native("MPI_SCATTERV", "SHM_SCATTERV"), t);
}

void Executor::reduce_to_root(TensorEntry& e, bool preloaded) {
  const Request& spec = e.request;
  const size_t count = elements(spec.shape);
  refuse_adasum(spec);
  if (preloaded) {  // the root reduces every rank's input as the control step carried it; the others are done
    if (transport_.rank() != spec.root) return;
    return reduce_preloaded(e.output, 0, count, spec.dtype, spec.op, final_scale(spec, transport_.size()),
                            "SHM_PRELOADED_REDUCE");
  }
  const void* input = e.input;
  if (spec.prescale != 1.0) {
    copy_scaled(spec.dtype, e.output, e.input, count, spec.prescale);
    input = e.output;
  }
  // MPI cannot reduce 16-bit floats (nor wrap 8-bit sums): the ring's
  // allreduce gives root the same values, at the price of everyone getting them.
  const int64_t t = timeline_.activity_start();
  if (!transport_.native_reduce(input, e.output, count, spec.dtype, spec.op, spec.root)) {
    ring_.allreduce(transport_, RingLayout::even(count, transport_.size()), input, e.output, spec.dtype, spec.op);
    timeline_.activity("RING_ALLREDUCE", t);
  } else {
    timeline_.activity(native("MPI_REDUCE", "SHM_REDUCE"), t);
  }
  if (transport_.rank() == spec.root) scale_buffer(spec.dtype, e.output, count, final_scale(spec, transport_.size()));
}

}  // namespace horo
