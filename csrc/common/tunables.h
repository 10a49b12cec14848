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
  // Larger tensors run alone, in place: GPU tensors over fusion_max_tensor_bytes, host ones over
  // fusion_max_host_tensor_bytes (HORO_FUSION_MAX_TENSOR_BYTES both; auto, -1: the engine settles it).
  int64_t fusion_max_tensor_bytes;
  int64_t fusion_max_host_tensor_bytes;
  double cycle_time_ms;
  int cache_capacity;
  std::string allreduce_algo;  // ring | mpi | auto
  std::string allgather_algo;
  std::string reducescatter_algo;
  int64_t ring_min_bytes;      // auto: ring at and above this size, MPI below
  int64_t ring_chunk_bytes;
  std::string transport;      // auto | shm | mpi (transport/transport_choice.h)
  int64_t shm_chunk_bytes;    // one half-slot of the shared segment
  int64_t shm_small_bytes;    // shm allreduce at or below: one step, every rank reduces all
  int64_t shm_preload_bytes;  // cached shm collectives up to this input size ride the control step (0: never)
  int64_t shm_stream_bytes;   // shm copies into a slot from this size: non-temporal stores (0: never, -1: auto)
  // The sizes from which shared-memory paths read peers' buffers directly (0: never; -1: auto,
  // the policy's choice for this machine, transport/shm/policy.h, where each is described).
  int64_t shm_single_copy_bytes = -1;           // gather, scatter and broadcast
  int64_t shm_exchange_single_copy_bytes = -1;  // allgather, alltoall (bytes per peer)
  int64_t shm_heap_bytes;  // each rank's heap of outputs its peers write into (0: none)
  int64_t shm_allreduce_push_bytes = -1;      // allreduce pushes slices into peers' outputs (-1: auto)
  int64_t shm_reduce_single_copy_bytes = -1;  // allreduce, reduce, reducescatter (-1: auto)
  // Two-level collectives across hosts (transport/hierarchical_transport.h): auto | 0 | 1.
  std::string hierarchical_allreduce;  // also decides broadcast
  std::string hierarchical_allgather;
  int64_t hierarchical_min_bytes;  // auto: two-level at and above this size
  double stall_check_seconds;
  double stall_shutdown_seconds;
  double peer_timeout_seconds;  // transport/peer_watch.h; <= 0: no deadline
  int log_level;  // 0 error, 1 warning, 2 info, 3 debug
  std::string timeline_path;  // rank 0 writes a Chrome trace here ("": none)
  bool timeline_mark_cycles;
  std::string gpu_transport;  // nccl | mpi | auto
  double nccl_timeout_seconds;  // NCCL init or work in flight past this is aborted (<= 0: never)
  // How long waiting threads spin (yielding) before they sleep. -1 (auto): settle_for_host().
  int spin_microseconds = -1;
  // Set by settle_for_host(): whether a spin yields the core after its first microseconds.
  // Only where this node runs more ranks than cores: the awaited rank may need
  // this core. Elsewhere a yield hands the core to whatever else is runnable
  // (OpenBLAS's and OpenMP's spinning workers) for a whole time slice.
  bool spin_yields = true;
  // Set at init too: ranks, hosts and transport, for the timeline's label.
  std::string topology;

  static Tunables from_environment();
  // Settles what depends on the host (`ranks_on_host` ranks on `cores` cores); the
  // shared-memory thresholds are the transport's (transport/shm/policy.h).
  void settle_for_host(int ranks_on_host, unsigned cores);
};

}  // namespace horo
