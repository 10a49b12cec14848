// The C interface (horo_c_api.h) over the engine: what framework op libraries
// call from their kernels. Nothing here may throw across the C boundary.
#include "horo_c_api.h"
#include "common/copy_bytes.h"

#include <cstring>
#include <string>

#include "c_api/core_state.h"
#include "common/error.h"
#include "common/types.h"

namespace horo {
namespace {

void copy_message(const std::string& message, char* out, size_t out_len) {
  if (out == nullptr || out_len == 0) return;
  const size_t n = std::min(message.size(), out_len - 1);
  copy_bytes(out, message.data(), n);
  out[n] = '\0';
}

// The core reports failures as messages that already name the tensor and the
// ranks; frameworks want a class too. These phrases are the controller's and
// the engine's own (controller.cc match(), engine.cc), kept in step with them.
int classify(const std::string& message) {
  if (message.empty()) return HORO_OK;
  if (message.find("shut down") != std::string::npos || message.find("was removed") != std::string::npos) {
    return HORO_ABORTED;
  }
  if (message.find("'s splits") != std::string::npos || message.find("is not one of the ranks") != std::string::npos) {
    return HORO_INVALID_ARGUMENT;
  }
  if (message.find("' failed: ") != std::string::npos) return HORO_UNKNOWN;
  return HORO_PRECONDITION;  // the coordinator's error responses: ranks disagree, or one never came
}

int submit(const horo_request* request, horo_done_fn done, void* user, int* status, char* error, size_t error_len) {
  const std::string name = request->name ? request->name : "";
  auto refuse = [&](int code, const std::string& why) {
    if (status) *status = code;
    copy_message(why, error, error_len);
    return 0;
  };
  std::shared_ptr<Engine> engine = running_engine();
  if (!engine) return refuse(HORO_ABORTED, "'" + name + "': horo has not been initialized; call horo.init() first");
  if (!collective_valid(request->collective)) return refuse(HORO_INVALID_ARGUMENT, "'" + name + "': unknown collective");
  const std::string kind = collective_name(static_cast<CollectiveType>(request->collective));
  // A bad argument on this rank alone: as the bindings' reject(), the other ranks are told, so their
  // namesakes fail at once instead of waiting for this tensor (forever: no stall shutdown by default).
  auto refuse_everywhere = [&](const std::string& why) {
    engine->reject(static_cast<CollectiveType>(request->collective), name, request->process_set, why);
    return refuse(HORO_INVALID_ARGUMENT, kind + " '" + name + "': " + why);
  };
  if (!dtype_valid(request->dtype)) return refuse_everywhere("unsupported dtype");
  if (!op_valid(request->op)) return refuse_everywhere("unsupported reduction op " + std::to_string(request->op));
  if (collective_reduces(static_cast<CollectiveType>(request->collective)) &&
      !dtype_reducible(static_cast<DataType>(request->dtype))) {
    return refuse_everywhere(std::string(dtype_name(static_cast<DataType>(request->dtype))) +
                             " tensors cannot be reduced; cast to an integer or float dtype first");
  }
  TensorEntry entry;
  Request& r = entry.request;
  r.type = static_cast<CollectiveType>(request->collective);
  r.dtype = static_cast<DataType>(request->dtype);
  r.op = static_cast<ReduceOp>(request->op);
  r.prescale = request->prescale;
  r.postscale = request->postscale;
  r.shape.assign(request->shape, request->shape + request->ndim);
  r.name = name;
  r.root = request->root;
  if (request->nsplits > 0) r.splits.assign(request->splits, request->splits + request->nsplits);
  r.process_set = request->process_set;
  entry.input = request->input;
  entry.output = request->output;
  if (collective_output_like_input(r.type) && !entry.output && r.num_elements() > 0) {
    return refuse_everywhere("no output buffer was given (a " + kind + " writes into the caller's)");
  }
  auto on_complete = [done, user](HandleTable::Result&& result) {
    horo_result out{};
    out.status = classify(result.error);
    out.message = result.error.c_str();
    if (const auto& a = result.allocated) {
      out.data = a->bytes.size() ? const_cast<AllocatedOutput&>(*a).bytes.data() : nullptr;
      out.nbytes = a->bytes.size();
      out.shape = a->shape.data();
      out.ndim = static_cast<int>(a->shape.size());
      out.received_splits = a->received_splits.data();
      out.nreceived = static_cast<int>(a->received_splits.size());
      out.value = a->value;
    }
    done(user, &out);
  };
  try {
    return engine->enqueue(std::move(entry), std::move(on_complete));
  } catch (const std::exception& e) {
    const std::string why = e.what();
    return refuse(why.find("shut down") != std::string::npos ? HORO_ABORTED : HORO_INVALID_ARGUMENT, why);
  }
}

int poll(int handle) {
  std::shared_ptr<Engine> engine = running_engine();
  if (!engine) return 1;
  try {
    return engine->poll(handle, /*forgotten_is_done=*/true) ? 1 : 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int process_info(int what) {
  ProcessInfo info;
  if (!running_process_info(&info)) return -1;
  switch (what) {
    case HORO_RANK: return info.rank;
    case HORO_SIZE: return info.size;
    case HORO_LOCAL_RANK: return info.local_rank;
    case HORO_LOCAL_SIZE: return info.local_size;
    case HORO_CROSS_RANK: return info.cross_rank;
    case HORO_CROSS_SIZE: return info.cross_size;
    default: return -1;
  }
}

const horo_c_api kTable = {HORO_C_API_VERSION, &submit, &poll, &process_info};

}  // namespace
}  // namespace horo

extern "C" const horo_c_api* horo_c_api_table(void) { return &horo::kTable; }
