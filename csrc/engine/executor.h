// Runs one fusion group of agreed responses on this rank's buffers: packs
// fused tensors into the fusion buffer, moves them with the chosen
// algorithm (our ring or the transport's own collective), and unpacks them,
// applying pre-/post-scale factors on the way in and out.
#pragma once

#include <vector>

#include "collectives/ring.h"
#include "common/tunables.h"
#include "engine/fusion_buffer.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"
#include "transport/transport.h"
#include "wire/messages.h"

namespace horo {

class Executor {
 public:
  Executor(Transport& transport, const Tunables& tunables, Timeline& timeline)
      : transport_(transport), tunables_(tunables), timeline_(timeline), ring_(tunables.ring_chunk_bytes),
        shm_(transport.shm()),
        shared_output_(shm_ ? shm_->output_allocator() : no_shared_outputs()),
        fusion_(shared_output_) {}

  // `group[i]` is the agreed response for `entries[i]`; all share one
  // collective, dtype, op, scale factors and root.
  void run(const std::vector<Response>& group, std::vector<TensorEntry>& entries);

 private:
  bool ring_for(const std::string& algo, size_t bytes) const;
  // The timeline's name for the transport's own collective (MPI_BCAST or SHM_BCAST).
  const char* native(const char* mpi_label, const char* shm_label) const;
  // `preloaded`: a lone tensor whose every rank's input came with the control
  // step (ShmCapabilities::preload): each rank computes its own output from those, with no step.
  // Only shared memory preloads, hence the timeline's SHM_PRELOADED_* names.
  void allreduce(std::vector<TensorEntry>& entries, bool preloaded);
  void reducescatter(std::vector<TensorEntry>& entries, bool preloaded);
  void allgather(const std::vector<Response>& group, std::vector<TensorEntry>& entries);
  void broadcast(std::vector<TensorEntry>& entries, bool preloaded);
  void alltoall(const Response& agreed, TensorEntry& entry);
  void gather(const Response& agreed, TensorEntry& entry);
  void scatter(TensorEntry& entry, bool preloaded);
  // Reducescatter and scatter write this rank's `rows` into the caller's output; an entry given
  // none (`_core.run(..., output=None)`, as allgather's may be) gets one from the core here
  // (`shared`: from the transport's output allocator, where peers may write into it).
  void allocate_missing_output(TensorEntry& e, size_t rows, bool shared = false);
  void reduce_to_root(TensorEntry& entry, bool preloaded);
  // A preloaded exchange's output (allgather, alltoall): the memory its control step located,
  // every rank's output having gone with it; null where every rank's input went instead.
  std::shared_ptr<char> located_output(bool preloaded) { return preloaded ? shm_->take_preloaded_output() : nullptr; }
  // Allreduce of one buffer, multiplied by `scale` afterwards (inside the ring when it runs).
  void reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, double scale = 1.0);
  // Elements [offset, offset + count) of every rank's preloaded input, reduced in rank
  // order (as the shared-memory one-step allreduce does) and scaled, into output.
  void reduce_preloaded(void* output, size_t offset, size_t count, DataType dtype, ReduceOp op, double scale,
                        const char* label);

  Transport& transport_;
  const Tunables& tunables_;
  Timeline& timeline_;  // activities of the group being run (engine/timeline.h)
  Ring ring_;
  ShmCapabilities* shm_;  // the transport's, or nullptr: then nothing is preloaded
  // Memory for an output the peers may write into, or null (ShmCapabilities::output_allocator).
  OutputAllocator shared_output_;
  FusionBuffer fusion_;
  // Per-rank scratch, kept from call to call so a small collective allocates nothing for it.
  std::vector<size_t> counts_, send_bytes_, recv_bytes_, cursor_;
  RingLayout layout_;
};

}  // namespace horo
