// The staged communicator's copies for device buffers. Every copy is
// synchronous: the staged backend is a test mode whose only job is to be
// right, and a finished copy needs no event to order it against any stream.
#include <cuda_runtime.h>

#include "comm/staged_communicator.h"
#include "common/cuda_check.h"

namespace fsdp {
namespace {

class CudaStager final : public Stager {
 public:
  void wait_stream(StreamHandle producer) override {
    FSDP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(producer)),
                    "staged collective waiting for its producer");
  }
  void to_host(void* host, const void* src, size_t bytes) override {
    if (bytes) FSDP_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDefault), "staging to host");
  }
  void to_device(void* dst, const void* host, size_t bytes) override {
    if (bytes)
      FSDP_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyDefault), "staging to device");
  }
};

}  // namespace

std::shared_ptr<Stager> make_cuda_stager() {
  return std::make_shared<CudaStager>();
}

}  // namespace fsdp
