// horo's collectives as TensorFlow AsyncOpKernels, compiled against the
// installed TensorFlow at first import (plugins/tensorflow/native.py).
//
// A kernel describes its buffers, submits them to horo's core through the C
// function table (csrc/c_api/horo_c_api.h) and returns; the core's background
// thread finishes the op from the completion callback. No TF thread ever
// blocks on a collective, so a graph may start collectives in any order on
// each rank without deadlock, whatever its inter-op thread count.
//
// The collective ops are not stateful (as Horovod's): tf.function would chain
// stateful ops in program order, which is exactly the blocking order that
// deadlocks when ranks build collectives in different orders. The ops with no
// data input (join, barrier, the process queries) are stateful, so they are
// neither constant-folded nor pruned.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "horo_c_api.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;  // NOLINT: TF's op macros expect it
using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

namespace {

std::atomic<const horo_c_api*> g_api{nullptr};

// horo's collective codes (csrc/common/types.h CollectiveType).
enum Collective { kAllreduce = 0, kBroadcast = 1, kAllgather = 2, kAlltoall = 3, kReducescatter = 4, kBarrier = 5,
                  kJoin = 11 };

int horo_dtype(DataType dtype) {
  switch (dtype) {
    case DT_UINT8: return 0;
    case DT_INT8: return 1;
    case DT_INT32: return 2;
    case DT_INT64: return 3;
    case DT_HALF: return 4;
    case DT_BFLOAT16: return 5;
    case DT_FLOAT: return 6;
    case DT_DOUBLE: return 7;
    case DT_INT16: return 8;
    case DT_BOOL: return 9;
    default: return -1;
  }
}

Status as_tf_status(int status, const std::string& message) {
  switch (status) {
    case HORO_OK: return Status();
    case HORO_INVALID_ARGUMENT: return errors::InvalidArgument(message);
    case HORO_PRECONDITION: return errors::FailedPrecondition(message);
    case HORO_ABORTED: return errors::Aborted(message);
    default: return errors::Unknown(message);
  }
}

const horo_c_api* api_or_fail(OpKernelContext* ctx) {
  const horo_c_api* api = g_api.load(std::memory_order_acquire);
  if (api == nullptr) {
    ctx->SetStatus(errors::FailedPrecondition(
        "horo's op library was loaded without horo's core; import horo.tensorflow instead of loading it directly"));
  }
  return api;
}

// One op's in-flight collectives: the op finishes when the last one completes
// (or a submit is refused), with the first error seen.
class PendingOp {
 public:
  // `expected`: how many collectives this op will submit.
  PendingOp(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, int expected)
      : ctx_(ctx), done_(std::move(done)), remaining_(expected + 1) {}

  OpKernelContext* ctx() { return ctx_; }
  void fail(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_error_.ok()) first_error_ = status;
  }
  // Each submitted collective, and the submitting kernel itself, release once.
  void release(int count = 1) {
    if (remaining_.fetch_sub(count) != count) return;
    if (!first_error_.ok()) ctx_->SetStatus(first_error_);
    AsyncOpKernel::DoneCallback done = std::move(done_);
    delete this;
    done();
  }

 private:
  OpKernelContext* ctx_;
  AsyncOpKernel::DoneCallback done_;
  std::atomic<int> remaining_;
  std::mutex mutex_;
  Status first_error_;
};

// What the completion callback needs for one collective of an op.
struct Submission {
  PendingOp* op;
  int output_index;   // where a core-allocated result goes; -1: none
  int splits_output;  // alltoall: where received splits go; -1: none
  DataType dtype;
  std::vector<int64_t> trailing;  // dims after the first, for a core-allocated result
};

void on_complete(void* user, const horo_result* result) {
  auto* s = static_cast<Submission*>(user);
  PendingOp* op = s->op;
  if (result->status != HORO_OK) {
    op->fail(as_tf_status(result->status, result->message));
  } else if (result->value >= 0 && s->output_index >= 0 && s->dtype == DT_INT32 && result->data == nullptr) {
    // join: the last rank to join.
    Tensor* out = nullptr;
    Status st = op->ctx()->allocate_output(s->output_index, TensorShape({}), &out);
    if (st.ok()) out->scalar<int32>()() = static_cast<int32>(result->value);
    else op->fail(st);
  } else if (s->output_index >= 0) {
    TensorShape shape;
    for (int i = 0; i < result->ndim; ++i) shape.AddDim(result->shape[i]);
    Tensor* out = nullptr;
    Status st = op->ctx()->allocate_output(s->output_index, shape, &out);
    if (st.ok() && result->nbytes > 0) {
      // The core's buffer is recycled after this call: copy it out now.
      std::memcpy(const_cast<char*>(out->tensor_data().data()), result->data,
                  std::min(result->nbytes, static_cast<size_t>(out->TotalBytes())));
    }
    if (st.ok() && s->splits_output >= 0) {
      Tensor* splits = nullptr;
      st = op->ctx()->allocate_output(s->splits_output, TensorShape({result->nreceived}), &splits);
      if (st.ok()) {
        auto flat = splits->flat<int32>();
        for (int i = 0; i < result->nreceived; ++i) flat(i) = static_cast<int32>(result->received_splits[i]);
      }
    }
    if (!st.ok()) op->fail(st);
  }
  delete s;
  op->release();
}

// Fills the parts of a request every collective shares.
horo_request describe(int collective, const std::string& name, const Tensor& input, void* output,
                      std::vector<int64_t>* shape, int process_set) {
  horo_request r{};
  r.collective = collective;
  r.name = name.c_str();
  r.input = input.tensor_data().data();
  r.output = output;
  r.dtype = horo_dtype(input.dtype());
  for (int i = 0; i < input.dims(); ++i) shape->push_back(input.dim_size(i));
  r.shape = shape->data();
  r.ndim = static_cast<int>(shape->size());
  r.op = 1;
  r.prescale = r.postscale = 1.0;
  r.process_set = process_set;
  return r;
}

// Submits one collective of `op`; on refusal records the error and returns false
// (its Submission is freed, no callback will come).
bool submit(const horo_c_api* api, PendingOp* op, const horo_request& request, Submission* s) {
  int status = HORO_OK;
  char error[1024] = {0};
  if (request.dtype < 0) {
    op->fail(errors::InvalidArgument("'", request.name, "': this dtype is not supported by horo"));
    delete s;
    return false;
  }
  if (api->submit(&request, &on_complete, s, &status, error, sizeof(error)) == 0) {
    op->fail(as_tf_status(status, error));
    delete s;
    return false;
  }
  return true;
}

// The names input: one string per tensor.
Status read_names(OpKernelContext* ctx, int index, int expected, std::vector<std::string>* names) {
  const Tensor& t = ctx->input(index);
  if (t.NumElements() != expected) {
    return errors::InvalidArgument("expected ", expected, " tensor names, got ", t.NumElements());
  }
  auto flat = t.flat<tstring>();
  for (int i = 0; i < expected; ++i) names->emplace_back(flat(i));
  return Status();
}

// Allreduce, reducescatter and broadcast of N tensors (one per input), each into
// an output this kernel allocates, all submitted before any completes (they fuse).
class InPlaceShapeKernel : public AsyncOpKernel {
 public:
  InPlaceShapeKernel(OpKernelConstruction* c, int collective) : AsyncOpKernel(c), collective_(collective) {
    if (collective_ != kBroadcast) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    } else {
      OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    }
    if (collective_ == kReducescatter) {
      OP_REQUIRES_OK(c, c->GetAttr("set_rank", &set_rank_));
      OP_REQUIRES_OK(c, c->GetAttr("set_size", &set_size_));
    }
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const horo_c_api* api = api_or_fail(ctx);
    if (api == nullptr) return done();
    const int n = ctx->num_inputs() - 1;
    std::vector<std::string> names;
    OP_REQUIRES_OK_ASYNC(ctx, read_names(ctx, n, n, &names), done);
    std::vector<Tensor*> outputs(n, nullptr);
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      TensorShape shape = in.shape();
      if (collective_ == kReducescatter) {
        OP_REQUIRES_ASYNC(ctx, in.dims() > 0, errors::InvalidArgument("'", names[i], "': reducescatter needs rank >= 1"),
                          done);
        const int64_t rows = in.dim_size(0);
        shape.set_dim(0, rows / set_size_ + (set_rank_ < rows % set_size_ ? 1 : 0));
      }
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, shape, &outputs[i]), done);
    }
    auto* op = new PendingOp(ctx, std::move(done), n);
    int submitted = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape;
      horo_request r = describe(collective_, names[i], ctx->input(i),
                                const_cast<char*>(outputs[i]->tensor_data().data()), &shape, process_set_);
      r.op = reduce_op_;
      r.prescale = prescale_;
      r.postscale = postscale_;
      r.root = root_;
      if (!submit(api, op, r, new Submission{op, -1, -1, ctx->input(i).dtype(), {}})) break;
      ++submitted;
    }
    op->release(1 + (n - submitted));  // the kernel's own reference and the never-submitted ones
  }

 private:
  int collective_;
  int reduce_op_ = 1, root_ = 0, set_rank_ = 0, set_size_ = 1, process_set_ = 0;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

class AllreduceKernel : public InPlaceShapeKernel {
 public:
  explicit AllreduceKernel(OpKernelConstruction* c) : InPlaceShapeKernel(c, kAllreduce) {}
};
class BroadcastKernel : public InPlaceShapeKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* c) : InPlaceShapeKernel(c, kBroadcast) {}
};
class ReducescatterKernel : public InPlaceShapeKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* c) : InPlaceShapeKernel(c, kReducescatter) {}
};

// Allgather and alltoall: only the agreed response knows the output's size, so
// the core allocates it and the callback copies it into the op's output.
class SizedAtCompletionKernel : public AsyncOpKernel {
 public:
  SizedAtCompletionKernel(OpKernelConstruction* c, int collective) : AsyncOpKernel(c), collective_(collective) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const horo_c_api* api = api_or_fail(ctx);
    if (api == nullptr) return done();
    const Tensor& in = ctx->input(0);
    const int name_input = collective_ == kAlltoall ? 2 : 1;
    std::vector<std::string> names;
    OP_REQUIRES_OK_ASYNC(ctx, read_names(ctx, name_input, 1, &names), done);
    OP_REQUIRES_ASYNC(ctx, in.dims() > 0,
                      errors::InvalidArgument("'", names[0], "': ", collective_ == kAlltoall ? "alltoall" : "allgather",
                                              " needs a tensor of rank >= 1"),
                      done);
    std::vector<int64_t> splits;
    if (collective_ == kAlltoall) {
      const Tensor& s = ctx->input(1);
      OP_REQUIRES_ASYNC(ctx, s.dims() == 1,
                        errors::InvalidArgument("'", names[0], "': splits must be a vector, not of shape ",
                                                s.shape().DebugString()),
                        done);
      auto flat = s.flat<int32>();
      for (int64_t i = 0; i < s.NumElements(); ++i) splits.push_back(flat(i));
    }
    auto* op = new PendingOp(ctx, std::move(done), 1);
    std::vector<int64_t> shape;
    horo_request r = describe(collective_, names[0], in, nullptr, &shape, process_set_);
    r.splits = splits.data();
    r.nsplits = static_cast<int>(splits.size());
    const bool ok = submit(api, op, r, new Submission{op, 0, collective_ == kAlltoall ? 1 : -1, in.dtype(), {}});
    op->release(ok ? 1 : 2);
  }

 private:
  int collective_;
  int process_set_ = 0;
};

class AllgatherKernel : public SizedAtCompletionKernel {
 public:
  explicit AllgatherKernel(OpKernelConstruction* c) : SizedAtCompletionKernel(c, kAllgather) {}
};
class AlltoallKernel : public SizedAtCompletionKernel {
 public:
  explicit AlltoallKernel(OpKernelConstruction* c) : SizedAtCompletionKernel(c, kAlltoall) {}
};

// Join and barrier: no data, an int32 scalar out (join: the last rank to join).
class SyncPointKernel : public AsyncOpKernel {
 public:
  SyncPointKernel(OpKernelConstruction* c, int collective) : AsyncOpKernel(c), collective_(collective) {
    if (collective_ == kBarrier) OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const horo_c_api* api = api_or_fail(ctx);
    if (api == nullptr) return done();
    std::string name = "join";
    if (collective_ == kBarrier) {
      std::vector<std::string> names;
      OP_REQUIRES_OK_ASYNC(ctx, read_names(ctx, 0, 1, &names), done);
      name = names[0];
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape({}), &out), done);
      out->scalar<int32>()() = 0;
    }
    auto* op = new PendingOp(ctx, std::move(done), 1);
    static const int64_t kEmpty[1] = {0};
    static uint8_t token;
    horo_request r{};
    r.collective = collective_;
    r.name = name.c_str();
    r.input = &token;
    r.output = &token;
    r.dtype = 0;
    r.shape = kEmpty;
    r.ndim = 1;
    r.op = 1;
    r.prescale = r.postscale = 1.0;
    r.process_set = process_set_;
    const bool ok = submit(api, op, r, new Submission{op, collective_ == kJoin ? 0 : -1, -1, DT_INT32, {}});
    op->release(ok ? 1 : 2);
  }

 private:
  int collective_;
  int process_set_ = 0;
};

class JoinKernel : public SyncPointKernel {
 public:
  explicit JoinKernel(OpKernelConstruction* c) : SyncPointKernel(c, kJoin) {}
};
class BarrierKernel : public SyncPointKernel {
 public:
  explicit BarrierKernel(OpKernelConstruction* c) : SyncPointKernel(c, kBarrier) {}
};

// rank, size, ...: read when the op runs, so a saved model reports the job it runs in.
class ProcessInfoKernel : public OpKernel {
 public:
  ProcessInfoKernel(OpKernelConstruction* c, int what) : OpKernel(c), what_(what) {}
  void Compute(OpKernelContext* ctx) override {
    const horo_c_api* api = api_or_fail(ctx);
    if (api == nullptr) return;
    const int value = api->process_info(what_);
    OP_REQUIRES(ctx, value >= 0, errors::FailedPrecondition("horo has not been initialized; call hvd.init() first"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32>()() = value;
  }

 private:
  int what_;
};

#define HORO_INFO_KERNEL(Class, What)                                          \
  class Class : public ProcessInfoKernel {                                     \
   public:                                                                     \
    explicit Class(OpKernelConstruction* c) : ProcessInfoKernel(c, What) {} \
  };
HORO_INFO_KERNEL(SizeKernel, HORO_SIZE)
HORO_INFO_KERNEL(RankKernel, HORO_RANK)
HORO_INFO_KERNEL(LocalSizeKernel, HORO_LOCAL_SIZE)
HORO_INFO_KERNEL(LocalRankKernel, HORO_LOCAL_RANK)

Status rows_unknown_shape(InferenceContext* c, int input, int output) {
  ShapeHandle in = c->input(input);
  if (!c->RankKnown(in)) {
    c->set_output(output, c->UnknownShape());
    return Status();
  }
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(output, out);
  return Status();
}

}  // namespace

#define HORO_TYPES "{uint8, int8, int16, int32, int64, half, bfloat16, float, double, bool}"

REGISTER_OP("HoroAllreduce")
    .Attr("T: " HORO_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("sum: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return Status();
    });

REGISTER_OP("HoroGroupedAllreduce")
    .Attr("T: list(" HORO_TYPES ")")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("sums: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return Status();
    });

REGISTER_OP("HoroBroadcast")
    .Attr("T: list(" HORO_TYPES ")")
    .Attr("root_rank: int")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("outputs: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return Status();
    });

REGISTER_OP("HoroReducescatter")
    .Attr("T: list(" HORO_TYPES ")")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("set_rank: int")
    .Attr("set_size: int")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("outputs: T")
    .SetShapeFn([](InferenceContext* c) {
      int set_rank = 0, set_size = 1;
      TF_RETURN_IF_ERROR(c->GetAttr("set_rank", &set_rank));
      TF_RETURN_IF_ERROR(c->GetAttr("set_size", &set_size));
      for (int i = 0; i < c->num_outputs(); ++i) {
        ShapeHandle in = c->input(i);
        if (!c->RankKnown(in)) {
          c->set_output(i, c->UnknownShape());
          continue;
        }
        DimensionHandle rows = c->Dim(in, 0);
        DimensionHandle mine = c->UnknownDim();
        if (c->ValueKnown(rows)) {
          const int64_t r = c->Value(rows);
          mine = c->MakeDim(r / set_size + (set_rank < r % set_size ? 1 : 0));
        }
        ShapeHandle out;
        TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, mine, &out));
        c->set_output(i, out);
      }
      return Status();
    });

REGISTER_OP("HoroAllgather")
    .Attr("T: " HORO_TYPES)
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn([](InferenceContext* c) { return rows_unknown_shape(c, 0, 0); });

REGISTER_OP("HoroAlltoall")
    .Attr("T: " HORO_TYPES)
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Input("tensor_name: string")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(rows_unknown_shape(c, 0, 0));
      c->set_output(1, c->input(1));
      return Status();
    });

REGISTER_OP("HoroJoin").Output("last_joined_rank: int32").SetIsStateful().SetShapeFn([](InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return Status();
});

REGISTER_OP("HoroBarrier")
    .Attr("process_set_id: int = 0")
    .Input("tensor_name: string")
    .Output("done: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return Status();
    });

#define HORO_INFO_OP(Name)                                                      \
  REGISTER_OP(Name).Output("value: int32").SetIsStateful().SetShapeFn([](InferenceContext* c) { \
    c->set_output(0, c->Scalar());                                              \
    return Status();                                                            \
  });
HORO_INFO_OP("HoroSize")
HORO_INFO_OP("HoroRank")
HORO_INFO_OP("HoroLocalSize")
HORO_INFO_OP("HoroLocalRank")

// Collectives move host memory, so tensors are pinned to the CPU; the name
// inputs are host strings.
REGISTER_KERNEL_BUILDER(Name("HoroAllreduce").Device(DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HoroGroupedAllreduce").Device(DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HoroBroadcast").Device(DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("HoroReducescatter").Device(DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("HoroAllgather").Device(DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HoroAlltoall").Device(DEVICE_CPU), AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("HoroJoin").Device(DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("HoroBarrier").Device(DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("HoroSize").Device(DEVICE_CPU), SizeKernel);
REGISTER_KERNEL_BUILDER(Name("HoroRank").Device(DEVICE_CPU), RankKernel);
REGISTER_KERNEL_BUILDER(Name("HoroLocalSize").Device(DEVICE_CPU), LocalSizeKernel);
REGISTER_KERNEL_BUILDER(Name("HoroLocalRank").Device(DEVICE_CPU), LocalRankKernel);

// Python hands the core's table over once, right after loading this library.
extern "C" __attribute__((visibility("default"))) int horo_tf_set_c_api(const void* table, int version) {
  const auto* api = static_cast<const horo_c_api*>(table);
  if (api == nullptr || version != HORO_C_API_VERSION || api->version != HORO_C_API_VERSION) return -1;
  g_api.store(api, std::memory_order_release);
  return 0;
}

extern "C" __attribute__((visibility("default"))) int horo_tf_c_api_version(void) { return HORO_C_API_VERSION; }
