#pragma once
// Internal pieces of the device sparsifiers (sparsifiers.cu): the selection on the device
// (sparse_select.cu: sampled thresholds, Gaussian bounds, one compaction pass, the exact cut
// to k) and the index codings (sparse_coding.cu: delta varints, the decoders, randomk's
// stratified indices, the scatters). All work runs on the caller's stream; the functions that
// synchronise say so (they read a count or a size the host needs).
// Thread-safety: one thread per instance (instances hold scratch buffers).
#include <cstdint>

#include "compressors/cuda/device_parts.h"
#include "compressors/rng.h"

namespace gradpress::compressors::cuda {

// The elements a sparsifier keeps, on the device, in index order (valid until the next
// selection on the same instance).
struct Kept {
  const int32_t* indices = nullptr;
  const float* values = nullptr;
  int64_t k = 0;
  uint64_t seed = 0;  // randomk's shared seed (seeded coding)
};

// A selection's bounds: keep v > hi || v < lo; t is the threshold the host's retry rules see.
struct Bounds {
  float lo, hi, t;
};

// The device words of a radix select (sparse_radix.cu), zeroed before its first pass.
struct RadixState {
  unsigned int prefix;  // the selected key once the last pass has run
  unsigned int unused;
  long long greater;     // keys above the selected one
  unsigned int done[4];  // blocks finished per pass (the last one picks the bin)
};

// The key at descending rank `rank` of `count` 31-bit keys, on the device without a host
// sync: three histogram passes, the last block of each picking the bin (RadixDigit,
// RadixBinHolds). The keys are keys[i], or MagnitudeBits(vals[i]) when keys is null.
class RadixSelect {
 public:
  // 0 <= rank < count. When `bounds` is set, the last pass also sets it to (-t, t, t) with
  // t = NextTowardZero(key) (SampledAbsThreshold's threshold). With `live`, only the first
  // min(*live, count) keys count (a count left on the device).
  void Run(const uint32_t* keys, const float* vals, int64_t count, int64_t rank, Bounds* bounds,
           Stream stream, const long long* live = nullptr);
  // The result of the last Run (device memory, valid once it has run on the stream).
  const RadixState* state() const { return reinterpret_cast<const RadixState*>(scratch_.data()); }

 private:
  DeviceBytes scratch_;  // RadixState, then the histograms of the passes
};

// The selection of topk, dgc, threshold and gaussiank: filter bounds on the device, one pass
// that keeps in[i] > hi || in[i] < lo in index order (FilterOutside), and KeepLargest.
class DeviceSelector {
 public:
  // Bounds given by the host; t is what Compact reports as the threshold.
  void SetBounds(float lo, float hi, float t, Stream stream);
  // Bounds (-t, t) with t = SampledAbsThreshold(in, n, ratio, m, rng), the CPU's sample drawn
  // from *rng, which advances as the CPU's does. n > 0.
  void SampleBounds(const float* in, int64_t n, double ratio, int64_t m, Rng* rng, Stream stream);
  // GaussianKCompressor's bounds (mean -+ z std); a NaN or Inf mean or std sets *err to
  // kNonFiniteInput and bounds that keep nothing. n > 0.
  void GaussianBounds(const float* in, int64_t n, double z, int* err, Stream stream);
  // Keeps every i with in[i] outside the bounds, in index order; synchronises to read the
  // count, which it returns (*t receives the threshold SampleBounds last set, for the CPU's
  // retry rules). `expected` sizes the first buffer; more survivors cost a second pass.
  int64_t Compact(const float* in, int64_t n, int64_t expected, float* t, Stream stream);
  // The survivors of the last Compact.
  Kept Survivors();
  // The k largest magnitudes of the survivors, ties to lower indices (KeepLargest); the
  // survivors themselves when there are at most k.
  Kept KeepLargest(int64_t k, Stream stream);
  // Compact then KeepLargest(k) without the read-back, as if the survivors numbered from k to
  // the buffer's size (what a first sample usually gives); after the stream has run, Missed()
  // says whether they did not (then the result is not the selection). 0 < k <= n.
  Kept SpeculateLargest(const float* in, int64_t n, int64_t expected, int64_t k, Stream stream);
  bool Missed();  // false when nothing was speculated since the last call

 private:
  void QueueCompaction(const float* in, int64_t n, Stream stream);          // into capacity_ slots
  void QueueControlCopy(Stream stream);                                     // into control_host_
  Kept CutToK(int64_t c, int64_t k, const long long* live, Stream stream);  // KeepLargest's
  int64_t survivors_ = 0, capacity_ = 0, speculated_k_ = 0;
  PinnedBytes control_host_;  // the control words, read back
  DeviceBytes control_;       // SelectControl (sparse_select.cu): count, bounds, threshold
  DeviceBytes temp_, keys_;
  DeviceBytes surv_idx_, surv_val_, kept_idx_, kept_val_, partials_;
  RadixSelect radix_;
};

// Delta index coding on the device (Sparsifier::WriteIndices with index_coding delta), without
// a synchronisation of its own: Encode queues the varints of idx[0..k) (strictly increasing)
// into the buffer it returns (at most 5k bytes) and a copy of their total size into pinned
// memory; Total() reads that size once the stream has run Encode's work, Wait(stream)
// synchronises the stream first. Valid until the next call.
class DeltaEncoder {
 public:
  const uint8_t* Encode(const int32_t* idx, int64_t k, Stream stream);
  int64_t Total() const;
  int64_t Wait(Stream stream) const;

 private:
  DeviceBytes total_, out_, temp_;
  PinnedBytes host_total_;
  int64_t k_ = 0;
};

// Decoders of the index codings into k int64 positions on the device (results valid until
// the next call). Malformed content sets *err; no kernel reads or writes out of range.
class IndexDecoder {
 public:
  // k int32 indices at dev (any alignment), strictly increasing and below n.
  const int64_t* Int32(const uint8_t* dev, int64_t k, int64_t n, int* err, Stream stream);
  // randomk: StratifiedIndices for the Rng state SplitMix64(seed) (`state0`).
  const int64_t* Stratified(uint64_t state0, int64_t k, int64_t n, Stream stream);
  // Exactly k delta varints fill dev[0..len) (len > 0 when k > 0).
  const int64_t* Delta(const uint8_t* dev, int64_t len, int64_t k, int64_t n, int* err,
                       Stream stream);

 private:
  void CountEnds(const uint8_t* dev, int64_t len, Stream stream);  // fills ends_[0..len]
  DeviceBytes pos_, steps_, ends_, temp_;
};

// out[pos[j]] = value j for j < k, where value j is values[j] (device floats) or, when values
// is null, the f32 at value_bytes + 4j (any alignment). Does nothing when *err is already set
// (an earlier kernel found the payload malformed); a position outside [0, n) sets
// kIndexOutOfRange. out must already be zero-filled.
void ScatterAsync(const int64_t* pos, const float* values, const uint8_t* value_bytes, int64_t k,
                  int64_t n, float* out, int* err, Stream stream);

// e[idx[j]] -= values[j] for j < k (error feedback's p - D(C(p)) on the kept elements).
void SubtractAtAsync(const int32_t* idx, const float* values, int64_t k, float* e, Stream stream);

// randomk's selection: idx[j] = StratifiedIndices(...)[j] for the Rng state `state0`, and
// val[j] = in[idx[j]], times its stratum's size when unbiased. k > 0, k <= n.
void StratifiedSelectAsync(const float* in, uint64_t state0, int64_t k, int64_t n, bool unbiased,
                           int32_t* idx, float* val, Stream stream);

// Grid size for a grid-stride kernel over `items` with `threads` per block (at least 1).
int GridFor(int64_t items, int threads);

}  // namespace gradpress::compressors::cuda
