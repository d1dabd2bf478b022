// The torch binding of the CUDA `gate` operator (gate_kernel.cu): checks, stream, and the Python module.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime.h>

cudaError_t gate_launch(const float* x, const float* g, float* out, int64_t n, cudaStream_t stream);

torch::Tensor gate(torch::Tensor x, torch::Tensor g) {
  TORCH_CHECK(x.is_cuda() && g.is_cuda(), "gate: x and g must be CUDA tensors (this is the CUDA build)");
  TORCH_CHECK(x.sizes() == g.sizes(), "gate: x and g must have the same shape");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && g.scalar_type() == torch::kFloat, "gate: float32 only");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto gc = g.contiguous();
  auto out = torch::empty_like(xc);
  const cudaError_t error = gate_launch(xc.data_ptr<float>(), gc.data_ptr<float>(), out.data_ptr<float>(),
                                        xc.numel(), c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(error == cudaSuccess, "gate: kernel launch failed: ", cudaGetErrorString(error));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gate", &gate, "x * sigmoid(g), elementwise (float32, CUDA)"); }
