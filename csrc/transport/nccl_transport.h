// The Transport over NCCL, for GPU memory. One per process set, created
// lazily (gpu/gpu_executor.cc) on the first GPU tensor: rank 0 of the set
// makes the NCCL unique id, the set's own (MPI) transport broadcasts it, and
// every member joins one communicator on its own CUDA stream.
//
// Every data-plane call is stream-ordered: it returns once the work is queued
// on stream(), and results are ready for whatever is queued there after it.
// Control-plane calls go to the set's MPI transport unchanged.
//
// The communicator is non-blocking (ncclCommInitRankConfig, blocking = 0), so
// no NCCL call can hold horo's background thread forever: in-progress calls are
// polled (gpu/nccl_wait.h) against HORO_NCCL_TIMEOUT_SECONDS, and creation ends
// the same way on every rank (gpu/collective_outcome.h).
#pragma once

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "common/error.h"
#include "gpu/cuda_event.h"

#include "gpu/cuda_api.h"
#include "gpu/nccl_api.h"
#include "transport/transport.h"

namespace horo {

constexpr const char* kNoUserPointToPoint =
    "point-to-point between GPU buffers is not carried by NCCL yet: send host memory";

class NcclTransport : public Transport {
 public:
  // Collective over `control`'s ranks; `device` is this rank's GPU. Throws the same
  // Error on every rank when creation fails on any (naming the ranks and NCCL's reason).
  NcclTransport(Transport& control, int device, double timeout_seconds);
  ~NcclTransport() override;

  int rank() const override { return control_.rank(); }
  int size() const override { return control_.size(); }
  int device() const { return device_; }
  cuda::Stream stream() const { return stream_; }

  // Point-to-point is queued and issued as one NCCL group at wait()/wait_all().
  int isend(const void* buf, size_t bytes, int peer) override;
  int irecv(void* buf, size_t bytes, int peer) override;
  void wait(int slot) override { wait_all(); }
  void wait_all() override;
  // Users' point-to-point takes host memory (the engine posts it on the set's host transport);
  // NCCL does not carry it yet, so these refuse rather than hand a device pointer to MPI.
  int post_send(const void*, size_t, int, int) override { throw Error(kNoUserPointToPoint); }
  int post_recv(void*, size_t, int, int) override { throw Error(kNoUserPointToPoint); }
  bool test_posted(int, size_t*) override { throw Error(kNoUserPointToPoint); }
  int max_tag() const override { return control_.max_tag(); }

  bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) override;
  // Sum or average times `scale` in one pass (NCCL's PreMulSum): false where
  // NCCL cannot (integer dtypes with a fractional scale, min/max/product with a scale).
  bool allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, double scale);
  bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op) override;
  bool reduce_scatter_scaled(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op, double scale);
  void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) override;
  void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                 const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) override;
  void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) override;
  bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, int root) override;
  bool reduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, int root,
                     double scale);
  void barrier() override { control_.barrier(); }
  // Sub-sets get their own NcclTransport from their own control transport.
  std::unique_ptr<Transport> split(const std::vector<int>& members) override;

  void allreduce_bitand(std::vector<uint64_t>& words) override { control_.allreduce_bitand(words); }
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override {
    return control_.gather_bytes(mine, root);
  }
  void broadcast_bytes(std::string& data, int root) override { control_.broadcast_bytes(data, root); }

  // Whether NCCL can reduce `dtype` with `op` scaled by `scale` in one collective.
  static bool can_reduce(DataType dtype, ReduceOp op, double scale);

  // Work queued up to `done` (recorded on stream()) for the tensors `names`, watched until it completes.
  void watch(CudaEventPtr done, std::string names);
  // Local, non-blocking: "" while the watched work is finishing or finished, else why it failed
  // (NCCL's asynchronous error, or older than the timeout), naming its tensors; the communicator is
  // then aborted. The caller makes the answer collective (GpuExecutor::run).
  std::string in_flight_failure();
  // Ends the communicator at once (ncclCommAbort), its queued work with it; later calls throw `why`.
  void abort(const std::string& why);

 private:
  struct InFlight {
    CudaEventPtr done;
    std::string names;
    std::chrono::steady_clock::time_point since;
  };
  // Joins the communicator (non-blocking, polled); "" or why not, with the communicator aborted.
  std::string join(const std::string& id_bytes);
  // The NCCL communicator, or an Error saying it was aborted.
  nccl::Comm comm() const;
  // Non-blocking communicators answer kInProgress while work is being set up: polled to the end here.
  void settle(nccl::Result result, const char* what);
  // A call inside an NCCL group: queued (kSuccess or kInProgress), settled at ncclGroupEnd.
  void queued(nccl::Result result, const char* what);
  // Blocks until stream()'s work is done, polling NCCL's error and the deadline.
  void wait_for_stream(const char* what);
  friend class NcclGroup;
  struct PointToPoint {
    bool send;
    void* buf;
    size_t bytes;
    int peer;
  };
  // The NCCL op for `op` with `scale` folded in; `created` says whether to destroy it after.
  nccl::RedOp reduction(DataType dtype, ReduceOp op, double scale, bool* created);

  Transport& control_;
  int device_;
  double timeout_seconds_;
  nccl::Comm comm_ = nullptr;
  std::string aborted_;  // why comm_ was aborted ("" while it lives)
  cuda::Stream stream_ = nullptr;
  std::vector<PointToPoint> pending_;
  std::deque<InFlight> in_flight_;
};

}  // namespace horo
