// Every knob in one table: environment name, Horovod alias, default and doc.
// The engine reads Tunables; horo.tunables() exposes the table so the README
// and horo-run can be checked against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace horo {

struct TunableSpec {
  const char* env;
  const char* horovod_alias;  // read when `env` is unset ("" if none)
  const char* default_value;
  const char* doc;
};

const std::vector<TunableSpec>& tunable_specs();
// A tunable's current text (environment, Horovod alias or default), for values
// read outside Tunables (e.g. library paths, read when the library loads).
std::string tunable_value(const char* env);

struct Tunables {
  int64_t fusion_threshold_bytes;
  int64_t fusion_max_tensor_bytes;  // larger tensors run alone, in place
  double cycle_time_ms;
  int cache_capacity;
  std::string allreduce_algo;  // ring | mpi | auto
  std::string allgather_algo;
  std::string reducescatter_algo;
  int64_t ring_min_bytes;      // auto: ring at and above this size, MPI below
  int64_t ring_chunk_bytes;
  double stall_check_seconds;
  double stall_shutdown_seconds;
  int log_level;  // 0 error, 1 warning, 2 info, 3 debug
  std::string timeline_path;  // rank 0 writes a Chrome trace here ("": none)
  bool timeline_mark_cycles;
  std::string gpu_transport;  // nccl | mpi | auto
  // How long waiting threads spin (yielding) before they sleep; set at init:
  // zero when this node runs more ranks than cores, where spinning steals
  // the core the awaited thread needs.
  int spin_microseconds = 0;

  static Tunables from_environment();
};

}  // namespace horo
