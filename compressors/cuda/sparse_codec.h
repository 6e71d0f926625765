#pragma once
// DeviceSparsifier: the DeviceCodec shared by the device sparsifiers (sparsifiers.cu), which
// only choose the kept elements. It owns the wire format of sparsifier.h (u8 coding, varint
// k, the indices, then k f32 values or the payload of the `then` quantizer of those values, as
// Pipeline writes it), decoding, SubtractDecoded, and checkpoint state in the CPU layout (a
// sparsifier's own state alone, or Pipeline's varint-prefixed pair when a quantizer follows).
//
// Encode synchronises once, in EncodeFinish, when the payload is in *out, where topk's first
// sample keeps enough (the usual case: it speculates); otherwise EncodeAsync also waits to
// read the survivor count (the host decides retries and sizes), and, above 256 KiB of
// delta-coded values, the varints' size.
// DecodeAsync does not synchronise: where a quantizer's payload follows delta varints, the
// host finds it in its own copy of the payload.
// Thread-safety: one thread per instance.
#include <memory>
#include <string>
#include <string_view>

#include "compressors/cuda/sparse_parts.h"
#include "compressors/sparsifier.h"

namespace gradpress::compressors::cuda {

class DeviceSparsifier : public DeviceCodec {
 public:
  std::string Name() const override;
  void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                   Stream stream) override;
  void EncodeFinish() override;
  // Only a speculating selection of a known k whose payload takes the one-wait path.
  bool QueuesWithoutWait(int64_t n) const override;
  const int* DecodeAsync(std::string_view bytes, int64_t n, float* out, Stream stream) override;
  void SubtractDecoded(float* e, int64_t n, Stream stream) override;
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;

 protected:
  // `name` is the CPU codec's ("topk"); kSeeded is randomk's coding.
  DeviceSparsifier(std::string name, IndexCoding coding, std::unique_ptr<DeviceQuantizer> then);
  // Chooses the kept elements of in[0..n), 0 <= n < 2^31 (n may be 0), on the stream.
  virtual Kept Select(const float* in, int64_t n, const StepContext& ctx, Stream stream) = 0;
  // The k that Select keeps of n elements when the host knows it beforehand (else -1).
  virtual int64_t KnownK(int64_t /*n*/) const { return -1; }
  // The sparsifier's own checkpoint state (the CPU class's SaveState / LoadState).
  virtual void SaveOwnState(std::string* /*out*/) const {}
  virtual void LoadOwnState(std::string_view in);

  const std::string& base_name() const { return name_; }
  // Whether Select may speculate (DeviceSelector::SpeculateLargest); Encode checks the guess
  // after its final wait and, when it missed, restores the state and encodes again without.
  // Off unless the subclass allows it (only then does Encode keep a copy of the state).
  bool speculate() const { return speculate_; }
  void AllowSpeculation() { speculate_ = true; }
  DeviceSelector selector_;
  ErrorWord err_;

 private:
  std::string name_;
  IndexCoding coding_;
  std::unique_ptr<DeviceQuantizer> then_;
  DeltaEncoder delta_;
  IndexDecoder decoder_;
  DeviceBytes quantized_, values_, upload_;
  // An encode between EncodeAsync and EncodeFinish: its arguments (for a missed guess's second
  // encode), the state before it, and where its payload's parts are.
  struct Pending {
    const float* in = nullptr;
    int64_t n = 0;
    StepContext ctx;
    PinnedBytes* out = nullptr;
    Stream stream = nullptr;
    std::string own, quantizer;  // the state a speculating Select advances
    Kept kept;
    size_t head = 0;         // header bytes
    int64_t index_size = 0;  // the index bytes copied down: for `moved` varints, their bound
    int64_t value_size = 0;  // the values' (or the quantizer's) bytes
    bool moved = false;      // the values move down to the varints' end after the wait
    bool queued = false;
  };
  Pending pending_;
  // The last Encode's kept elements and its quantizer bytes (host copy), for SubtractDecoded.
  Kept last_;
  int64_t last_n_ = -1;
  std::string last_quantized_;
  bool speculate_ = false;
};

}  // namespace gradpress::compressors::cuda
