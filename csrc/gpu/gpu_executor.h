// Runs fusion groups of GPU tensors for one process set: the GPU counterpart
// of engine/executor.h, chosen by the engine for groups whose memory is CUDA.
//
// Two ways to move them, agreed by every member on the first GPU tensor:
// - NCCL (transport/nccl_transport.h): device-side fusion buffer, copies and
//   collectives queued on horo's stream, scale factors folded into the
//   reduction (NCCL's ncclAvg / PreMulSum), no host round trip;
// - MPI staging, where NCCL is absent or cannot serve (HORO_GPU_TRANSPORT=mpi,
//   two ranks on one GPU, a reduction NCCL lacks): copies through pinned host
//   memory and the set's CPU executor, so results equal the CPU path's.
// Either way horo's stream first waits on each tensor's producer event, and a
// "done" event recorded after the group is what the caller's stream waits on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/tunables.h"
#include "engine/executor.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"
#include "gpu/device_memory.h"
#include "transport/nccl_transport.h"
#include "transport/transport.h"

namespace horo {

class GpuExecutor {
 public:
  // `control`: the set's MPI transport; `host`: its CPU executor (for staging).
  GpuExecutor(Transport& control, Executor& host, const Tunables& tunables, Timeline& timeline)
      : control_(control), host_(host), tunables_(tunables), timeline_(timeline) {}
  ~GpuExecutor();

  void run(const std::vector<Response>& group, std::vector<TensorEntry>& entries);
  // "nccl" or "mpi" once chosen, "" before the first GPU tensor.
  const std::string& transport_name() const { return chosen_; }

 private:
  // Collective over the set, on its first GPU group: NCCL or staging, the same on every rank.
  void choose(int device);
  void staged(const std::vector<Response>& group, std::vector<TensorEntry>& entries);
  // A large allreduce (one tensor, or a fused group packed on the device) staged in chunks,
  // copies overlapping the MPI reduction.
  void staged_allreduce_pipelined(const Response& agreed, std::vector<TensorEntry>& entries);
  static constexpr size_t kStagingChunkBytes = 4 << 20;
  // False when NCCL cannot reduce this group exactly like the CPU path (it is then staged).
  bool through_nccl(const std::vector<Response>& group, std::vector<TensorEntry>& entries);
  void allreduce(std::vector<TensorEntry>& entries);
  void broadcast(std::vector<TensorEntry>& entries);
  void allgather(const std::vector<Response>& group, std::vector<TensorEntry>& entries);
  void reducescatter(std::vector<TensorEntry>& entries);
  void alltoall(const Response& agreed, TensorEntry& entry);
  void gather(const Response& agreed, TensorEntry& entry);
  void scatter(TensorEntry& entry);
  void reduce_to_root(TensorEntry& entry);
  // An unfused collective of a tensor on another GPU of this rank, through scratch on this one.
  bool on_this_device(const std::vector<Response>& group, TensorEntry& entry);
  // Device-to-device (or host stand-in) copy queued on horo's stream.
  void copy(void* dst, const void* src, size_t bytes);
  // The same for collective_shapes.h, which counts `esize`-byte elements.
  auto copier(size_t esize) {
    return [this, esize](char* to, const char* from, size_t count) { copy(to, from, count * esize); };
  }
  std::shared_ptr<DeviceMemory> device_memory(size_t bytes);
  // Records the done event after everything queued for `entries` and hands it to each.
  void finish(std::vector<TensorEntry>& entries);

  Transport& control_;
  Executor& host_;
  const Tunables& tunables_;
  Timeline& timeline_;
  std::string chosen_;
  std::string refusal_;  // why the GPU path cannot run here (rethrown for every later group)
  int device_ = -1;
  cuda::Stream stream_ = nullptr;  // NCCL's stream, or the staging copies' own
  std::unique_ptr<NcclTransport> nccl_;
  GrowOnly<DeviceMemory> fusion_, scratch_;
  GrowOnly<PinnedMemory> pinned_;
};

}  // namespace horo
