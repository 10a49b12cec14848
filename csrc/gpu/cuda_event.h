// A CUDA event owned by horo: recorded on a stream, waited on by another
// stream (no host sync), destroyed with its last reference. Tensors carry one
// from the producer's stream at enqueue ("ready"), and results one from
// horo's stream ("done") that synchronize() makes the caller's stream wait on.
#pragma once

#include <memory>

#include "gpu/cuda_api.h"

namespace horo {

class CudaEvent {
 public:
  // Created on `device` and recorded on `stream` at once.
  CudaEvent(int device, cuda::Stream stream);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Work queued on `stream` from now on starts after this event's work.
  void make_wait(cuda::Stream stream) const;
  // Whether the event's work is done, without blocking (throws on a CUDA error).
  bool query() const;
  // Blocks the calling thread until the event's work is done (the staging path's host side).
  void synchronize() const;
  int device() const { return device_; }

 private:
  int device_;
  cuda::Event event_ = nullptr;
};

using CudaEventPtr = std::shared_ptr<CudaEvent>;

}  // namespace horo
