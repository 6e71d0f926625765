#pragma once
// KeyCodecs: the per-key codec state of a worker's client, held by composition by every
// carrier (grpc_ps_client.h, sim/in_process_ps_client.h), so each encode and decode loop exists
// once: the registered model and its bucket split, a push codec per key (each with its own
// error feedback / momentum / RNG state; CUDA tensors on the device, device_codecs.h), the
// pull decoders, and that state's save and load for checkpoints (CodecState).
//
//   KeyCodecs codecs(options);                     // validates options.push
//   codecs.SetModel(specs, bucket_keys);           // fresh push codecs (Register)
//   std::vector<KeyPush> p = codecs.Encode(step, grads, begin, end, &metrics);
//   codecs.Decode(i, payload, &out[i]);
//
// Thread-safety: one thread at a time, except Encode/Decode of disjoint keys (buckets) at once.
#include <torch/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compressors/compressor.h"
#include "worker/client/client_options.h"
#include "worker/client/device_codecs.h"
#include "worker/client/step_metrics.h"

namespace gradpress::worker {

using compressors::TensorSpec;

// One key's encoded push: a codec payload, or (a lossless codec) the tensor itself, whose
// memory a carrier may send without a copy.
struct KeyPush {
  compressors::KeyPayload payload;  // codec, shape, dtype; bytes unless `raw` is defined
  torch::Tensor raw;                // CPU float32 contiguous
};

// The push codecs' state, one object per client (a KeyCodecs, or a sharded client's set).
class CodecState {
 public:
  virtual ~CodecState() = default;
  // Checkpoints: the push codecs' state per key. LoadState needs the model registered (the
  // same model); a state that does not fit throws InvalidArgument and changes nothing.
  virtual std::string SaveState() const = 0;
  virtual void LoadState(std::string_view state) = 0;
  // Replaces the push codec of every compressed key (dynamic compression); fresh state.
  virtual void SetPushCodec(const CodecSpec& push) = 0;
  // Gives each compressed key its own push codec (compress.auto: one spec per key of the
  // registered model, in model order); fresh state. A bad spec throws and changes nothing.
  virtual void SetKeyPushCodecs(const std::vector<CodecSpec>& per_key) = 0;
  // Sets every compressed key's sparsifier density, keeping all state (DGC warm-up). False
  // if the push codec has no density.
  virtual bool SetPushDensity(double ratio) = 0;
};

class KeyCodecs : public CodecState {
 public:
  explicit KeyCodecs(const ClientOptions& options);
  ~KeyCodecs() override;

  // Checks a split of a model of `keys` keys; returns it, empty for one bucket (no split).
  static std::vector<int> CheckSplit(size_t keys, const std::vector<int>& bucket_keys);
  // The model and its split (empty: no split); fresh push codecs. Throws on a bad split.
  void SetModel(const std::vector<TensorSpec>& model, const std::vector<int>& bucket_keys);
  const std::vector<TensorSpec>& model() const { return model_; }
  const std::vector<int>& bucket_keys() const { return bucket_keys_; }
  // A call's keys [begin, end) and its bucket on the wire (-1: the whole model): bucket -1
  // needs no split; bucket b must be registered (0 without a split, which is the whole model).
  struct CallKeys {
    size_t begin, end;
    int bucket;
  };
  CallKeys Keys(int bucket) const;
  // Checks ts (the whole model) against the registered model; the shapes of keys [begin, end).
  void CheckTensors(const std::vector<torch::Tensor>& ts, const char* what, size_t begin = 0,
                    size_t end = ~size_t{0}) const;

  // Keys [begin, end) of grads encoded by their push codecs; adds bytes_up and encode_ms.
  // CUDA gradients: ready marks where backward completed them (null: wait for all queued work);
  // device encodes are queued behind it at once, and encode_ms counts from where the GPU got
  // there (the whole call if it already had).
  std::vector<KeyPush> Encode(int64_t step, const std::vector<torch::Tensor>& grads, size_t begin,
                              size_t end, StepMetrics* m, const CudaMark* ready = nullptr);
  // The shared decoder of a codec (thread-safe).
  const compressors::Compressor& Decoder(const std::string& codec);
  // Key i's payload into o (any device; in place for float32 host and CUDA tensors); checks
  // the shape; adds its bytes to *bytes. later: device decodes are checked there
  // (DeviceCodecs::Decode), not waited for here.
  void Decode(size_t i, const compressors::Payload& p, torch::Tensor* o, uint64_t* bytes,
              DecodeChecks* later = nullptr);
  // Payloads of keys [begin, end), in order, into out[begin, end); returns the decode ms.
  double DecodeAll(const std::vector<compressors::KeyPayload>& got, std::vector<torch::Tensor>* out,
                   uint64_t* bytes, size_t begin, size_t end, DecodeChecks* later = nullptr);

  std::string SaveState() const override;
  void LoadState(std::string_view state) override;
  void SetPushCodec(const CodecSpec& push) override;
  void SetKeyPushCodecs(const std::vector<CodecSpec>& per_key) override;
  bool SetPushDensity(double ratio) override;

  // A push sent again (a sharded server that restarted behind this worker rebuilds the step it
  // lost from it: sharded_ps_client.h). KeepNextPushes: the next Encode keeps a copy of its
  // pushes (raw tensors copied) for TakeKeptPushes. ResendNext: the next Encode returns
  // `pushes` instead of encoding (no codec state moves, no bytes counted). For whole-model
  // calls, one at a time.
  void KeepNextPushes();
  std::vector<KeyPush> TakeKeptPushes();
  void ResendNext(std::vector<KeyPush> pushes);

 private:
  std::unique_ptr<compressors::Compressor> MakePushCodec(const CodecSpec& push,
                                                         const TensorSpec& s) const;
  bool Compressed(size_t i) const;
  const CodecSpec& SpecOf(size_t i) const {
    return key_specs_.empty() ? push_spec_ : key_specs_[i];
  }
  CodecSpec push_spec_;
  std::vector<CodecSpec> key_specs_;  // per key when SetKeyPushCodecs chose; else push_spec_
  int64_t min_numel_;
  bool skip_1d_;
  double momentum_correction_;
  std::vector<TensorSpec> model_;
  std::vector<int> bucket_keys_;
  std::vector<std::pair<size_t, size_t>> buckets_;              // keys [begin, end)
  std::vector<std::unique_ptr<compressors::Compressor>> push_;  // per key
  DeviceCodecs device_;  // the push codecs and decoders of CUDA tensors, made on first use
  std::mutex decoders_mu_;
  std::map<std::string, std::unique_ptr<compressors::Compressor>> decoders_;
  bool keep_next_ = false;
  std::vector<KeyPush> kept_;                   // KeepNextPushes
  std::optional<std::vector<KeyPush>> resend_;  // ResendNext
};

// Lossless ("none") payloads of `params` (float32), keyed by `model`: initial or published
// weights.
std::vector<compressors::KeyPayload> WeightPayloads(const std::vector<TensorSpec>& model,
                                                    const std::vector<torch::Tensor>& params);
// A push as a payload with its bytes (a raw tensor's copied).
compressors::KeyPayload ToPayload(const KeyPush& p);

}  // namespace gradpress::worker
