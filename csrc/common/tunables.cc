#include "common/tunables.h"

#include <cstdlib>
#include <string>

#include "common/error.h"

namespace horo {

const std::vector<TunableSpec>& tunable_specs() {
  static const std::vector<TunableSpec> specs = {
      {"HORO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "67108864",
       "bytes of ready tensors packed into one fused collective; 0 disables fusion"},
      {"HORO_FUSION_MAX_TENSOR_BYTES", "", "1048576",
       "larger tensors are not fused but reduced alone, in place: copying them through the fusion buffer "
       "costs more than the start-up of a collective of their own"},
      {"HORO_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "1",
       "ms an idle background thread sleeps between coordination cycles (an enqueue wakes it at once)"},
      {"HORO_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "1024",
       "responses remembered so repeated tensors skip negotiation; 0 disables the cache"},
      {"HORO_ALLREDUCE_ALGO", "", "auto", "ring | mpi | auto (ring from HORO_RING_MIN_BYTES up)"},
      {"HORO_ALLGATHER_ALGO", "", "auto", "ring | mpi | auto (as for allreduce, but MPI's with two ranks)"},
      {"HORO_REDUCESCATTER_ALGO", "", "auto", "ring | mpi | auto, as for allreduce"},
      {"HORO_RING_MIN_BYTES", "", "262144", "auto picks the ring all-reduce at and above this many bytes"},
      {"HORO_RING_CHUNK_BYTES", "", "262144", "pipeline chunk of the ring: small enough to stay in L2"},
      {"HORO_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60",
       "warn about tensors some ranks have submitted and others have not after this long; 0 disables"},
      {"HORO_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
       "fail such stalled tensors with an error after this long; 0 waits forever"},
      {"HORO_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning", "error | warning | info | debug"},
      {"HORO_TIMELINE", "HOROVOD_TIMELINE", "",
       "rank 0 writes a Chrome trace (Perfetto) of every tensor's phases to this file; empty: off"},
      {"HORO_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "0",
       "1: the timeline also marks each background cycle that ran something"},
      {"HORO_GPU_TRANSPORT", "", "auto",
       "GPU tensors: nccl | mpi (staged through pinned host memory) | auto (NCCL when it loads and each rank "
       "has a GPU of its own, else mpi)"},
      {"HORO_NCCL_LIB", "", "",
       "path of libnccl.so.2 to load; unset: one already loaded, the nvidia-nccl-cu13/cu12 wheel, the system's"},
      {"HORO_CUDART_LIB", "", "",
       "path of libcudart to load; unset: one already loaded, the nvidia-cuda-runtime wheel, the system's"},
  };
  return specs;
}

namespace {

std::string lookup(const char* env) {
  for (const auto& spec : tunable_specs()) {
    if (std::string(spec.env) != env) continue;
    if (const char* v = std::getenv(spec.env)) return v;
    if (spec.horovod_alias[0] != '\0') {
      if (const char* v = std::getenv(spec.horovod_alias)) return v;
    }
    return spec.default_value;
  }
  throw Error(std::string("unknown tunable ") + env);
}

double number(const char* env) {
  std::string text = lookup(env);
  try {
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    return value;
  } catch (const std::exception&) {
    throw Error(std::string(env) + "='" + text + "' is not a number");
  }
}

std::string algorithm(const char* env) {
  std::string value = lookup(env);
  if (value != "ring" && value != "mpi" && value != "auto") {
    throw Error(std::string(env) + "='" + value + "' must be ring, mpi or auto");
  }
  return value;
}

int log_level_from(const std::string& text) {
  if (text == "error" || text == "ERROR" || text == "0") return 0;
  if (text == "warning" || text == "WARNING" || text == "1") return 1;
  if (text == "info" || text == "INFO" || text == "2") return 2;
  if (text == "debug" || text == "DEBUG" || text == "trace" || text == "TRACE" || text == "3") return 3;
  throw Error("HORO_LOG_LEVEL='" + text + "' must be error, warning, info or debug");
}

}  // namespace

std::string tunable_value(const char* env) { return lookup(env); }

Tunables Tunables::from_environment() {
  Tunables t;
  t.fusion_threshold_bytes = static_cast<int64_t>(number("HORO_FUSION_THRESHOLD"));
  t.fusion_max_tensor_bytes = static_cast<int64_t>(number("HORO_FUSION_MAX_TENSOR_BYTES"));
  t.cycle_time_ms = number("HORO_CYCLE_TIME");
  t.cache_capacity = static_cast<int>(number("HORO_CACHE_CAPACITY"));
  t.allreduce_algo = algorithm("HORO_ALLREDUCE_ALGO");
  t.allgather_algo = algorithm("HORO_ALLGATHER_ALGO");
  t.reducescatter_algo = algorithm("HORO_REDUCESCATTER_ALGO");
  t.ring_min_bytes = static_cast<int64_t>(number("HORO_RING_MIN_BYTES"));
  t.ring_chunk_bytes = static_cast<int64_t>(number("HORO_RING_CHUNK_BYTES"));
  if (t.ring_chunk_bytes < 4096) t.ring_chunk_bytes = 4096;
  t.stall_check_seconds = number("HORO_STALL_CHECK_TIME_SECONDS");
  t.stall_shutdown_seconds = number("HORO_STALL_SHUTDOWN_TIME_SECONDS");
  t.log_level = log_level_from(lookup("HORO_LOG_LEVEL"));
  t.timeline_path = lookup("HORO_TIMELINE");
  t.timeline_mark_cycles = number("HORO_TIMELINE_MARK_CYCLES") != 0;
  t.gpu_transport = lookup("HORO_GPU_TRANSPORT");
  if (t.gpu_transport != "auto" && t.gpu_transport != "nccl" && t.gpu_transport != "mpi") {
    throw Error("HORO_GPU_TRANSPORT='" + t.gpu_transport + "' must be nccl, mpi or auto");
  }
  if (t.fusion_threshold_bytes < 0) t.fusion_threshold_bytes = 0;
  if (t.cache_capacity < 0) t.cache_capacity = 0;
  if (t.cycle_time_ms < 0) t.cycle_time_ms = 0;
  return t;
}

}  // namespace horo
