// gate(x, g) = x * sigmoid(g), elementwise, float32, on an NVIDIA GPU: the CUDA twin of gate.cpp.
// Only the CUDA runtime is included here, so nvcc's device passes stay short; the torch binding is in
// gate_cuda.cpp (compiled by g++).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void gate_kernel(const float* __restrict__ x, const float* __restrict__ g, float* __restrict__ out,
                            int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = x[i] / (1.0f + expf(-g[i]));
  }
}

}  // namespace

// Launches on `stream`; returns the launch's error (cudaSuccess when the kernel was queued).
cudaError_t gate_launch(const float* x, const float* g, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) {
    return cudaSuccess;
  }
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  gate_kernel<<<static_cast<unsigned int>(blocks), threads, 0, stream>>>(x, g, out, n);
  return cudaGetLastError();
}
