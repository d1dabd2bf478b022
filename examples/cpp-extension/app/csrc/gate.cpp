// gate(x, g) = x * sigmoid(g), elementwise, float32, CPU: a small custom torch operator.
#include <torch/extension.h>

#include <cmath>

torch::Tensor gate(torch::Tensor x, torch::Tensor g) {
  TORCH_CHECK(x.sizes() == g.sizes(), "gate: x and g must have the same shape");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && g.scalar_type() == torch::kFloat, "gate: float32 only");
  auto xc = x.contiguous();
  auto gc = g.contiguous();
  auto out = torch::empty_like(xc);
  const float* xs = xc.data_ptr<float>();
  const float* gs = gc.data_ptr<float>();
  float* os = out.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) {
    os[i] = xs[i] / (1.0f + std::exp(-gs[i]));
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gate", &gate, "x * sigmoid(g), elementwise (float32, CPU)"); }
