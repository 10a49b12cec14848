#include "common/tunables.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace horo {

const std::vector<TunableSpec>& tunable_specs() {
  static const std::vector<TunableSpec> specs = {
      {"HORO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "67108864",
       "bytes of ready tensors packed into one fused collective; 0 disables fusion"},
      {"HORO_FUSION_MAX_TENSOR_BYTES", "", "auto",
       "larger tensors are not fused but reduced alone, in place: copying them through the fusion buffer "
       "costs more than the start-up of a collective of their own; auto: 65536 for host tensors where the "
       "job runs on one host (shared memory), 1048576 otherwise and for GPU tensors"},
      {"HORO_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "1",
       "ms an idle background thread sleeps between coordination cycles (an enqueue wakes it at once)"},
      {"HORO_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "1024",
       "responses remembered so repeated tensors skip negotiation; 0 disables the cache"},
      {"HORO_ALLREDUCE_ALGO", "", "auto", "ring | mpi | auto (ring from HORO_RING_MIN_BYTES up)"},
      {"HORO_ALLGATHER_ALGO", "", "auto", "ring | mpi | auto (as for allreduce, but MPI's with two ranks)"},
      {"HORO_REDUCESCATTER_ALGO", "", "auto", "ring | mpi | auto, as for allreduce"},
      {"HORO_RING_MIN_BYTES", "", "262144", "auto picks the ring all-reduce at and above this many bytes"},
      {"HORO_RING_CHUNK_BYTES", "", "262144", "pipeline chunk of the ring: small enough to stay in L2"},
      {"HORO_TRANSPORT", "", "auto",
       "auto | shm | mpi: auto moves a process set's data and control messages through shared memory when "
       "all its ranks are on one host, through MPI otherwise"},
      {"HORO_SHM_CHUNK_BYTES", "", "1048576",
       "bytes each rank publishes per shared-memory step (the segment holds two per rank); "
       "small enough that a step's reads stay in L2"},
      {"HORO_SHM_SMALL_BYTES", "", "16384",
       "shared-memory allreduce at or below this size: one step, every rank reduces the whole buffer "
       "(above: reduce-scatter then all-gather, two steps per chunk)"},
      {"HORO_SHM_PRELOAD_BYTES", "", "65536",
       "a cached shared-memory broadcast, scatter or reducescatter whose input is at most this size "
       "(allreduce, allgather and alltoall: HORO_SHM_SMALL_BYTES, but an allgather or alltoall between 2 ranks with "
       "cores of their own only up to 4 KiB of output; reduce and a gather's senders: HORO_SHM_SMALL_BYTES, this size "
       "between 2 ranks with cores of their own) "
       "travels with the cycle's control step: one rendezvous instead of two (not a broadcast or scatter whose "
       "root's buffer moves straight into the receivers' instead: HORO_SHM_SINGLE_COPY_BYTES); 0: never"},
      {"HORO_SPIN_MICROSECONDS", "", "auto",
       "how long a wait for another rank or thread spins (a pause, and yielding the core where ranks outnumber cores) "
       "before it sleeps; "
       "auto: 50"},
      {"HORO_SHM_STREAM_BYTES", "", "auto",
       "shared-memory collectives copy pieces of this size and up into the segment with non-temporal "
       "stores, which skip fetching the lines the readers read last (on one 2-vCPU VM a plain copy into "
       "them ran 3-10x slower in some jobs; on another plain copies were faster in every job); 0: never; "
       "auto: the ranks time both kinds once at start-up, and stream from 16384 where plain is slower (elsewhere, where at "
       "least 8 ranks of a host run on cores of their own, a call's pushes into its peers' outputs stream where they "
       "come to 2 MiB or more)"},
      {"HORO_SHM_SINGLE_COPY_BYTES", "", "auto",
       "shared-memory broadcast, gather and scatter from this size up: receivers read straight from the "
       "senders' buffers (process_vm_readv) where the kernel allows it (broadcast: only where a host runs "
       "at most 4 ranks, and the root writes the last 1/size of each receiver's buffer itself; a gather or "
       "scatter into outputs in the heaps likewise: the idle side reads 1 - 1/size or 1/size of the rows while "
       "the others write the rest into them); 0: never; auto: broadcast from 16384 on a host of 2 ranks, else 65536 while it runs no more ranks "
       "than cores (else 16777216), gather and scatter into the heaps from 524288 (else 1048576), other gathers "
       "and scatters from 16777216 (a scatter into the heaps from 65536 writes straight into them all the same)"},
      {"HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES", "", "auto",
       "the same for shared-memory allgather and alltoall, where every rank receives, by the bytes read "
       "from one peer (allgather: the largest contribution; alltoall: per pair of ranks); auto: 1048576 "
       "while a host runs no more ranks than cores, else 4194304"},
      {"HORO_SHM_HEAP_BYTES", "", "1073741824",
       "each rank's heap of memory its host's peers can write into (a sparse memfd: pages exist once used); "
       "allgather and alltoall outputs and the NumPy API's new arrays from 64 KiB come from it, so each rank "
       "copies its data straight into its peers' outputs, one copy instead of two; an output that does not fit "
       "goes through the segment; 0: no heap"},
      {"HORO_SHM_ALLREDUCE_PUSH_BYTES", "", "auto",
       "shared-memory allreduce from this size, where every output is in its rank's heap: each rank writes its "
       "reduced slice straight into its peers' outputs instead of its slot (nobody copies slices out); auto: 0 "
       "(always) while a host runs no more ranks than cores, else 1048576 (where ranks share cores, the pushes "
       "lengthen the wait for the last rank)"},
      {"HORO_SHM_REDUCE_SINGLE_COPY_BYTES", "", "auto",
       "shared-memory allreduce, reduce and reducescatter from this size: each rank reads its slice (reducescatter: "
       "its rows) of every peer's input "
       "directly (process_vm_readv) and writes the reduced slice into their outputs (process_vm_writev, or stores "
       "where every output is in its rank's heap), where the kernel allows it; 0: never; auto: 524288 or 131072 "
       "per rank on the host, whichever is larger, while it runs no more ranks than cores, else 1048576 for allreduce and 16777216 for reduce; "
       "a reducescatter from 4194304 everywhere"},
      {"HORO_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", "auto",
       "auto | 0 | 1: allreduce (and broadcast) across hosts as intra-host reduce-scatter, cross-host allreduce "
       "of each local rank's slice, intra-host all-gather; auto: when the job spans hosts with several ranks each, "
       "from HORO_HIERARCHICAL_MIN_BYTES up"},
      {"HORO_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER", "auto",
       "auto | 0 | 1: allgather across hosts as a cross-host allgather among ranks of one local rank, then intra-host"},
      {"HORO_HIERARCHICAL_MIN_BYTES", "", "65536",
       "auto picks the hierarchical (two-level) collectives at and above this many bytes"},
      {"HORO_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60",
       "warn about tensors some ranks have submitted and others have not after this long; 0 disables"},
      {"HORO_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", "0",
       "1: no stall warnings (as HORO_STALL_CHECK_TIME_SECONDS=0)"},
      {"HORO_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
       "fail such stalled tensors with an error after this long; 0 waits forever"},
      {"HORO_PEER_TIMEOUT_SECONDS", "", "60",
       "a wait for other ranks that has not completed after this long, and in which some rank no longer answers "
       "(its host off the network, its process stopped), fails with an error naming those ranks and hosts on every "
       "rank, and the job ends; ranks that answer may be slow for as long as they like; 0: wait forever"},
      {"HORO_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning", "error | warning | info | debug"},
      {"HORO_TIMELINE", "HOROVOD_TIMELINE", "",
       "rank 0 writes a Chrome trace (Perfetto) of every tensor's phases to this file; empty: off; "
       "DYNAMIC: off until horo.start_timeline(path) (Horovod's meaning)"},
      {"HORO_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "0",
       "1: the timeline also marks each background cycle that ran something"},
      {"HORO_GPU_TRANSPORT", "", "auto",
       "GPU tensors: nccl | mpi (staged through pinned host memory) | auto (NCCL when it loads and each rank "
       "has a GPU of its own, else mpi)"},
      {"HORO_NCCL_TIMEOUT_SECONDS", "", "600",
       "NCCL work (communicator creation, a collective in flight) not finished after this long is presumed "
       "hung: the communicator is aborted and the GPU collectives of its process set raise on every rank; "
       "0 waits forever"},
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

// A byte count (negatives are 0), or -1 for "auto" (settled at init, from the host).
int64_t bytes_or_auto(const char* env) {
  return lookup(env) == "auto" ? -1 : std::max<int64_t>(0, static_cast<int64_t>(number(env)));
}

std::string switch_mode(const char* env) {
  std::string value = lookup(env);
  if (value == "true" || value == "True" || value == "TRUE") value = "1";
  if (value == "false" || value == "False" || value == "FALSE") value = "0";
  if (value != "auto" && value != "0" && value != "1") {
    throw Error(std::string(env) + "='" + value + "' must be auto, 0 or 1");
  }
  return value;
}

int log_level_from(const std::string& given) {
  // Horovod's levels in any case (trace, debug, info, warning, error, fatal) or a number.
  std::string text = given;
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text == "error" || text == "fatal" || text == "0") return 0;
  if (text == "warning" || text == "warn" || text == "1") return 1;
  if (text == "info" || text == "2") return 2;
  if (text == "debug" || text == "trace" || text == "3") return 3;
  throw Error("HORO_LOG_LEVEL (or HOROVOD_LOG_LEVEL)='" + given +
              "' must be error, warning, info or debug (or Horovod's trace, fatal)");
}

}  // namespace

std::string tunable_value(const char* env) { return lookup(env); }

Tunables Tunables::from_environment() {
  Tunables t;
  t.fusion_threshold_bytes = static_cast<int64_t>(number("HORO_FUSION_THRESHOLD"));
  t.fusion_max_tensor_bytes = bytes_or_auto("HORO_FUSION_MAX_TENSOR_BYTES");
  t.fusion_max_host_tensor_bytes = t.fusion_max_tensor_bytes;
  t.cycle_time_ms = number("HORO_CYCLE_TIME");
  t.cache_capacity = static_cast<int>(number("HORO_CACHE_CAPACITY"));
  t.allreduce_algo = algorithm("HORO_ALLREDUCE_ALGO");
  t.allgather_algo = algorithm("HORO_ALLGATHER_ALGO");
  t.reducescatter_algo = algorithm("HORO_REDUCESCATTER_ALGO");
  t.ring_min_bytes = static_cast<int64_t>(number("HORO_RING_MIN_BYTES"));
  t.ring_chunk_bytes = static_cast<int64_t>(number("HORO_RING_CHUNK_BYTES"));
  if (t.ring_chunk_bytes < 4096) t.ring_chunk_bytes = 4096;
  t.transport = lookup("HORO_TRANSPORT");
  if (t.transport != "auto" && t.transport != "shm" && t.transport != "mpi") {
    throw Error("HORO_TRANSPORT='" + t.transport + "' must be auto, shm or mpi");
  }
  t.shm_chunk_bytes = static_cast<int64_t>(number("HORO_SHM_CHUNK_BYTES"));
  if (t.shm_chunk_bytes < 4096) t.shm_chunk_bytes = 4096;
  t.shm_small_bytes = static_cast<int64_t>(number("HORO_SHM_SMALL_BYTES"));
  if (t.shm_small_bytes < 0) t.shm_small_bytes = 0;
  t.shm_preload_bytes = std::max<int64_t>(0, static_cast<int64_t>(number("HORO_SHM_PRELOAD_BYTES")));
  t.shm_stream_bytes = bytes_or_auto("HORO_SHM_STREAM_BYTES");
  t.shm_single_copy_bytes = bytes_or_auto("HORO_SHM_SINGLE_COPY_BYTES");
  t.shm_exchange_single_copy_bytes = bytes_or_auto("HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES");
  t.shm_heap_bytes = std::max<int64_t>(0, static_cast<int64_t>(number("HORO_SHM_HEAP_BYTES")));
  t.shm_allreduce_push_bytes = bytes_or_auto("HORO_SHM_ALLREDUCE_PUSH_BYTES");
  t.shm_reduce_single_copy_bytes = bytes_or_auto("HORO_SHM_REDUCE_SINGLE_COPY_BYTES");
  t.spin_microseconds = lookup("HORO_SPIN_MICROSECONDS") == "auto" ? -1 : static_cast<int>(number("HORO_SPIN_MICROSECONDS"));
  t.hierarchical_allreduce = switch_mode("HORO_HIERARCHICAL_ALLREDUCE");
  t.hierarchical_allgather = switch_mode("HORO_HIERARCHICAL_ALLGATHER");
  t.hierarchical_min_bytes = static_cast<int64_t>(number("HORO_HIERARCHICAL_MIN_BYTES"));
  t.stall_check_seconds = number("HORO_STALL_CHECK_TIME_SECONDS");
  if (number("HORO_STALL_CHECK_DISABLE") != 0) t.stall_check_seconds = 0;
  t.stall_shutdown_seconds = number("HORO_STALL_SHUTDOWN_TIME_SECONDS");
  t.peer_timeout_seconds = number("HORO_PEER_TIMEOUT_SECONDS");
  t.log_level = log_level_from(lookup("HORO_LOG_LEVEL"));
  t.timeline_path = lookup("HORO_TIMELINE");
  // Horovod's keyword, not a file name: the timeline starts later, from start_timeline().
  if (t.timeline_path == "DYNAMIC") t.timeline_path.clear();
  t.timeline_mark_cycles = number("HORO_TIMELINE_MARK_CYCLES") != 0;
  t.nccl_timeout_seconds = number("HORO_NCCL_TIMEOUT_SECONDS");
  t.gpu_transport = lookup("HORO_GPU_TRANSPORT");
  if (t.gpu_transport != "auto" && t.gpu_transport != "nccl" && t.gpu_transport != "mpi") {
    throw Error("HORO_GPU_TRANSPORT='" + t.gpu_transport + "' must be nccl, mpi or auto");
  }
  if (t.fusion_threshold_bytes < 0) t.fusion_threshold_bytes = 0;
  if (t.cache_capacity < 0) t.cache_capacity = 0;
  if (t.cycle_time_ms < 0) t.cycle_time_ms = 0;
  return t;
}

void Tunables::settle_for_host(int ranks_on_host, unsigned cores) {
  const bool oversubscribed = static_cast<unsigned>(ranks_on_host) > cores;
  // A spin mostly yields where ranks outnumber cores (futex_wait.cc); 50 us beat 20 there
  // (benchmarks/MEASUREMENTS.md, "Shared-memory thresholds").
  if (spin_microseconds < 0) spin_microseconds = 50;
  spin_yields = oversubscribed;
}

}  // namespace horo
