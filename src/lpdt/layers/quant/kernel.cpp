// The one-pass quantiser of lpdt's eager CPU path (lpdt/layers/quant/kernel.py builds it).
//
// out = round(clamp((x - lo) / step + xi, 0, levels)) * step + lo, element by element, in the
// float operations and the order of lpdt.layers.quant.quantizers.quantize's tensor version, so
// the two give the same bits (tests/layers/test_quant_kernel.py). xi is that module's dither:
// the top 16 bits of Wellons' lowbias32 hash of (key + element index) * 0x61C88647, mapped to
// U(-1/2, 1/2); key is the (seed, salt) key the caller computes. Built without fused multiply-add
// (-ffp-contract=off): the tensor version rounds the product and the sum separately.
// ATen and torch's pybind11 casters only, not <torch/extension.h>, whose C++ frontend (torch/all.h)
// doubled the compile: 23.2 against 12.6 s for this file on the 2-core VM (2026-11-28).
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>

#include <cstdint>

namespace {

constexpr uint32_t kGolden = 0x61C88647u;
constexpr uint32_t kM1 = 0x21F0AAADu;
constexpr uint32_t kM2 = 0x735A2D97u;

// Elements [begin, end) of one call. A 32-bit loop counter and plain comparisons for the clamp:
// with them gcc 12 vectorises the loop (with a 64-bit counter, or std::fmin / std::fmax, it did
// not). target_clones: the widest of these instruction sets this CPU has is chosen when the
// library loads, so a build cached on a shared disk also runs on an older CPU.
__attribute__((target_clones("avx512f", "avx2", "default"))) void quantize_range(
    const float* __restrict x, float* __restrict out, int32_t begin, int32_t end, float lo,
    float step, float levels, bool stochastic, uint32_t key) {
  if (stochastic) {
    for (int32_t i = begin; i < end; ++i) {
      uint32_t h = (static_cast<uint32_t>(i) + key) * kGolden;
      h ^= h >> 16;
      h *= kM1;
      h ^= h >> 15;
      h *= kM2;
      h ^= h >> 15;
      float u = static_cast<float>(static_cast<int32_t>(h >> 16));
      u = (u + 0.5f) * 0.0000152587890625f - 0.5f;  // 2^-16: every step exact in fp32
      float q = (x[i] - lo) / step + u;
      q = q < 0.0f ? 0.0f : q;
      q = q > levels ? levels : q;
      out[i] = __builtin_nearbyintf(q) * step + lo;  // round half to even, as torch.round
    }
  } else {
    for (int32_t i = begin; i < end; ++i) {
      float q = (x[i] - lo) / step;
      q = q < 0.0f ? 0.0f : q;
      q = q > levels ? levels : q;
      out[i] = __builtin_nearbyintf(q) * step + lo;
    }
  }
}

// out for x over [lo, hi] with step = max((hi - lo) / levels, min_step), the float32 operations
// of the tensor version. x: float32 on the CPU, fewer than 2^31 elements (the caller checks);
// key: the dither's 32-bit key (ignored unless stochastic). A new contiguous tensor shaped like x.
at::Tensor quantize_over(const at::Tensor& x, float lo, float hi, double levels,
                         double min_step, bool stochastic, int64_t key) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "x: float32 on the CPU");
  TORCH_CHECK(x.numel() < (int64_t{1} << 31), "x: at most 2^31 - 1 elements");
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const float* src = xc.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float flevels = static_cast<float>(levels), fmin_step = static_cast<float>(min_step);
  float step = (hi - lo) / flevels;
  step = step < fmin_step ? fmin_step : step;  // clamp_min: a NaN stays NaN
  const uint32_t ukey = static_cast<uint32_t>(key);
  at::parallel_for(0, xc.numel(), int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    quantize_range(src, dst, static_cast<int32_t>(begin), static_cast<int32_t>(end), lo, step,
                   flevels, stochastic, ukey);
  });
  return out;
}

}  // namespace

// quantizers.quantize: lo, hi are one-element float32 tensors.
at::Tensor quantize(const at::Tensor& x, const at::Tensor& lo, const at::Tensor& hi,
                    double levels, double min_step, bool stochastic, int64_t key) {
  TORCH_CHECK(lo.numel() == 1 && hi.numel() == 1, "lo, hi: one element each");
  return quantize_over(x, lo.item<float>(), hi.item<float>(), levels, min_step, stochastic, key);
}

// quantizers.quantize_minmax: the range is x's own [min, max] (NaN if x holds a NaN, as amin /
// amax). x must not be empty.
at::Tensor quantize_minmax(const at::Tensor& x, double levels, double min_step,
                           bool stochastic, int64_t key) {
  TORCH_CHECK(x.numel() > 0, "x: empty");
  const at::Tensor xc = x.contiguous();
  const auto [lo, hi] = at::aminmax(xc);
  return quantize_over(xc, lo.item<float>(), hi.item<float>(), levels, min_step, stochastic, key);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("quantize", &quantize, "One-pass uniform quantiser over [lo, hi]");
  m.def("quantize_minmax", &quantize_minmax, "The same over the tensor's own [min, max]");
}
