// The one-pass quantiser of lpdt's eager CPU path (lpdt/layers/quant/kernel.py builds it and calls
// it through ctypes).
//
// out = round(clamp((x - lo) / step + xi, 0, levels)) * step + lo, element by element, in the
// float operations and the order of lpdt.layers.quant.quantizers.quantize's tensor version, so
// the two give the same bits (tests/layers/test_quant_kernel.py). xi is that module's dither:
// the top 16 bits of Wellons' lowbias32 hash of (key + element index) * 0x61C88647, mapped to
// U(-1/2, 1/2); key is the (seed, salt) key the caller computes. Built without fused multiply-add
// (-ffp-contract=off): the tensor version rounds the product and the sum separately.
//
// Plain C++ with a C entry point and no torch headers: the caller passes the tensors' data
// pointers. With ATen's and torch's pybind11 headers this file took 12.6 s to compile on the
// 2-core VM (a fresh machine paid it in every first 8-bit run and test session); without them
// well under a second (docs/notebook/2026-11-28-quant-kernel-c-abi.md). One thread, as before:
// built without OpenMP, ATen's parallel_for ran the whole range inline in the old build too.
#include <cstdint>

namespace {

constexpr uint32_t kGolden = 0x61C88647u;
constexpr uint32_t kM1 = 0x21F0AAADu;
constexpr uint32_t kM2 = 0x735A2D97u;

// A 32-bit loop counter and plain comparisons for the clamp: with them gcc 12 vectorises the loop
// (with a 64-bit counter, or std::fmin / std::fmax, it did not). target_clones: the widest of
// these instruction sets this CPU has is chosen when the library loads, so a build cached on a
// shared disk also runs on an older CPU.
__attribute__((target_clones("avx512f", "avx2", "default"))) void quantize_range(
    const float* __restrict x, float* __restrict out, int32_t n, float lo, float step,
    float levels, bool stochastic, uint32_t key) {
  if (stochastic) {
    for (int32_t i = 0; i < n; ++i) {
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
    for (int32_t i = 0; i < n; ++i) {
      float q = (x[i] - lo) / step;
      q = q < 0.0f ? 0.0f : q;
      q = q > levels ? levels : q;
      out[i] = __builtin_nearbyintf(q) * step + lo;
    }
  }
}

}  // namespace

// n float32 elements of x (contiguous) over [*lo_at, *hi_at] into out, with
// step = max((hi - lo) / levels, min_step), the float32 operations of the tensor version.
// n < 2^31 (the caller checks); key: the dither's 32-bit key (ignored unless stochastic).
// lo, hi: one float32 each (read here, which saves the caller two reads into Python floats).
extern "C" void lpdt_quantize(const float* x, float* out, int32_t n, const float* lo_at,
                              const float* hi_at, float levels, float min_step, bool stochastic,
                              uint32_t key) {
  const float lo = *lo_at, hi = *hi_at;
  float step = (hi - lo) / levels;
  step = step < min_step ? min_step : step;  // clamp_min: a NaN stays NaN
  quantize_range(x, out, n, lo, step, levels, stochastic, key);
}
