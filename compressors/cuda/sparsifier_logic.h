#pragma once
// The per-element selection logic of the device sparsifiers (topk, randomk, threshold,
// gaussiank, dgc): which elements are kept, shared by their CUDA kernels (sparse_select.cu,
// sparse_radix.cu, and sparse_coding.cu for randomk) and by the host tests
// (tests/compressors/cuda/sparsifier_logic_test.cc), which run these functions in loops that
// mirror the kernels and compare the result with the CPU codecs byte for byte. The coding of
// the kept indices is in sparsifier_index_logic.h.
//
// What each piece reproduces (the CPU code is the definition):
//   randomk   StratifiedIndices (randomk.cc): index j is drawn with draw j of Rng(seed), i.e.
//             the state SplitMix64(seed) advanced j + 1 steps.
//   samplers  SampledAbsThreshold (selection.cc): sample s reads |in[SamplePosition(s)]|,
//             drawing once from the codec's Rng for each s in order (when m < n).
//   filters   FilterOutside (selection.cc): keep v > hi || v < lo (NaN never kept).
//   top-k     KeepLargest: k largest magnitudes, ties at the k-th go to lower indices; on the
//             device a radix select finds the k-th largest magnitude bits and a scan keeps
//             the keys above it and the first equal ones (survivors arrive in index order).
//             The sampled threshold's order statistic uses the same select.
//   gaussiank MeanStd's final arithmetic (the sums themselves are reduced in another order
//             on the device, so mean and std may differ from the CPU's in the last bits).
//
// Thread-safety: pure functions.
#include <cmath>
#include <cstdint>

#include "compressors/cuda/device_logic.h"
#include "compressors/cuda/rng_logic.h"

namespace gradpress::compressors::cuda {

// ---- randomk: stratified indices -------------------------------------------------------

// floor(j n / k), exact in 64 bits for j <= k and n, k < 2^31 (randomk.cc uses __int128).
GP_HD int64_t StratumBegin(int64_t j, int64_t k, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(j) * static_cast<uint64_t>(n)) /
                              static_cast<uint64_t>(k));
}

// Index j of StratifiedIndices(seed, k, n), given `state`, the Rng state after its draw
// (SplitMix64(seed) advanced j + 1 steps); *size receives the stratum's size.
GP_HD int32_t StratifiedIndex(uint64_t state, int64_t j, int64_t k, int64_t n, int64_t* size) {
  const int64_t begin = StratumBegin(j, k, n);
  const int64_t end = StratumBegin(j + 1, k, n);
  *size = end - begin;
  const uint64_t offset = BelowOf(Xorshift64Out(state), static_cast<uint64_t>(end - begin));
  return static_cast<int32_t>(begin + static_cast<int64_t>(offset));
}

// ---- sampled thresholds (SampledAbsThreshold) -------------------------------------------

// The element sample s reads when m < n samples are drawn with stride n / m (a double, as
// the CPU computes it) and `draw` is the sample's draw of the codec's Rng.
GP_HD int64_t SamplePosition(int64_t s, int64_t n, double stride, uint64_t draw) {
  const auto base = static_cast<int64_t>(static_cast<double>(s) * stride);
  const int64_t span = static_cast<int64_t>(static_cast<double>(s + 1) * stride) - base;
  const int64_t width = span > 1 ? span : 1;
  const int64_t pos = base + static_cast<int64_t>(BelowOf(draw, static_cast<uint64_t>(width)));
  return pos < n - 1 ? pos : n - 1;
}

// The magnitude |v| as sortable bits: for non-NaN floats, a < b on |v| iff the bits compare
// the same way (NaN sorts above Inf). Bit 31 is always clear.
GP_HD uint32_t MagnitudeBits(float v) { return FloatBits(v) & 0x7FFFFFFFu; }

// std::nextafter(m, 0.f) for a magnitude m >= +0 given as MagnitudeBits: one ulp toward zero,
// 0 stays 0, NaN stays NaN.
GP_HD float NextTowardZero(uint32_t mag_bits) {
  if (mag_bits == 0 || mag_bits > 0x7F800000u) return BitsFloat(mag_bits);
  return BitsFloat(mag_bits - 1);
}

// ---- radix select (sparse_radix.cu): the key at descending rank r ---------------------------

// Three passes over 31-bit keys fix bits 30..20 (2048 bins), 19..10 and 9..0 (1024 bins).
constexpr int kRadixPasses = 3;
constexpr int kRadixMaxBins = 2048;
GP_HD int RadixShift(int pass) { return pass == 0 ? 20 : (pass == 1 ? 10 : 0); }
GP_HD int RadixBins(int pass) { return pass == 0 ? 2048 : 1024; }

// The bin of `key` in `pass`, or -1 when the bits that earlier passes fixed (in prefix) differ.
GP_HD int RadixDigit(uint32_t key, int pass, uint32_t prefix) {
  const int shift = RadixShift(pass);
  const int top = pass == 0 ? 31 : shift + 10;
  if ((key >> top) != (prefix >> top)) return -1;
  return static_cast<int>((key >> shift) & static_cast<uint32_t>(RadixBins(pass) - 1));
}

// Whether the bin with `above` matching keys in higher bins and `in_bin` of its own holds the
// key at descending rank `rank` (counted among the matching keys).
GP_HD bool RadixBinHolds(int64_t above, int64_t in_bin, int64_t rank) {
  return above <= rank && rank < above + in_bin;
}

// KeepLargest's compaction around the k-th largest key `kth` with `greater` keys above it:
// a scan of these flags (keys above in the high word, keys equal in the low) gives each
// survivor's slot; the first k - greater equal keys (index order) are kept.
GP_HD uint64_t KeepFlags(uint32_t key, uint32_t kth) {
  return key > kth ? (uint64_t{1} << 32) : (key == kth ? uint64_t{1} : uint64_t{0});
}

// The output slot of a survivor with `key` whose predecessors' KeepFlags sum to `before`, or
// -1 when it is not kept; ties = k - greater.
GP_HD int64_t KeepSlot(uint32_t key, uint32_t kth, uint64_t before, int64_t ties) {
  const auto gt = static_cast<int64_t>(before >> 32);
  const auto eq = static_cast<int64_t>(before & 0xFFFFFFFFu);
  if (key > kth) return gt + (eq < ties ? eq : ties);
  if (key == kth && eq < ties) return gt + eq;
  return -1;
}

// ---- filters ------------------------------------------------------------------------------

// FilterOutside's test: v is kept when above hi or below lo (NaN compares false).
GP_HD bool OutsideBounds(float v, float lo, float hi) { return v > hi || v < lo; }

// ---- gaussiank: bounds from the moments ---------------------------------------------------

GP_HD bool FiniteDouble(double x) { return x - x == 0.0; }  // false for NaN and +-Inf

// MeanStd's final step and GaussianKCompressor's bounds: sum and sumsq are the sums of
// d = in[i] - shift and of d^2 over n > 0 elements. False (bounds untouched) when the mean
// or the standard deviation is not finite (the CPU codec's "input has NaN or Inf").
GP_HD bool GaussianBounds(double sum, double sumsq, int64_t n, float shift, double z, float* lo,
                          float* hi) {
  const double m = sum / static_cast<double>(n);
  const double mean = m + static_cast<double>(shift);
  const double var = sumsq / static_cast<double>(n) - m * m;
  const double sd = sqrt(var > 0.0 ? var : 0.0);
  if (!FiniteDouble(mean) || !FiniteDouble(sd)) return false;
  *lo = static_cast<float>(mean - z * sd);
  *hi = static_cast<float>(mean + z * sd);
  return true;
}

}  // namespace gradpress::compressors::cuda
