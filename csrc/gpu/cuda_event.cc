#include "gpu/cuda_event.h"

#include "gpu/cuda_loader.h"

namespace horo {

CudaEvent::CudaEvent(int device, cuda::Stream stream) : device_(device) {
  cuda::DeviceGuard on(device);
  cuda::check(cuda::api().cudaEventCreateWithFlags(&event_, cuda::kEventDisableTiming), "cudaEventCreateWithFlags");
  const cuda::Status recorded = cuda::api().cudaEventRecord(event_, stream);
  if (recorded != cuda::kSuccess) {
    cuda::api().cudaEventDestroy(event_);
    cuda::check(recorded, "cudaEventRecord on the tensor's stream");
  }
}

CudaEvent::~CudaEvent() {
  // Legal while work is pending: CUDA releases the event once it completes.
  if (event_ != nullptr) cuda::api().cudaEventDestroy(event_);
}

void CudaEvent::make_wait(cuda::Stream stream) const {
  cuda::check(cuda::api().cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

bool CudaEvent::query() const {
  const cuda::Status status = cuda::api().cudaEventQuery(event_);
  if (status == cuda::kErrorNotReady) return false;
  cuda::check(status, "cudaEventQuery");
  return true;
}

void CudaEvent::synchronize() const {
  cuda::check(cuda::api().cudaEventSynchronize(event_), "cudaEventSynchronize");
}

}  // namespace horo
