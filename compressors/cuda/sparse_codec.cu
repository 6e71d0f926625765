// DeviceSparsifier (sparse_codec.h): payload assembly, decoding, SubtractDecoded and state.
// The header (coding, k, randomk's seed) is written by the host straight into the pinned
// output; the index bytes and the values (or the quantizer's payload of them) come down with
// one device-to-host copy each.
#include <algorithm>
#include <cstring>
#include <limits>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/sparse_codec.h"
#include "compressors/cuda/sparsifier_index_logic.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int64_t kMaxNumel = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxVarintBytes = 10;
// The most bytes a delta encode copies and moves beyond its payload (4 per index, the varints'
// bound over their least, and the values) to save a wait: ~20 us of host memmove.
constexpr int64_t kOneWaitBytes = int64_t{256} << 10;
bool OneWait(int64_t k, int64_t value_size) { return 4 * k + value_size <= kOneWaitBytes; }

}  // namespace

DeviceSparsifier::DeviceSparsifier(std::string name, IndexCoding coding,
                                   std::unique_ptr<DeviceQuantizer> then)
    : name_(std::move(name)), coding_(coding), then_(std::move(then)) {}

std::string DeviceSparsifier::Name() const { return then_ ? name_ + "+" + then_->Name() : name_; }

void DeviceSparsifier::EncodeAsync(const float* in, int64_t n, const StepContext& ctx,
                                   PinnedBytes* out, Stream stream) {
  const std::string name = Name();
  GP_ENFORCE(n >= 0 && n <= kMaxNumel, name, ": tensors above 2^31-1 elements ",
             "are not supported by int32 indices (numel ", n, ")");
  last_n_ = -1;
  pending_ = Pending{};
  Pending& p = pending_;
  p.in = in;
  p.n = n;
  p.ctx = ctx;
  p.out = out;
  p.stream = stream;
  // The state a speculating Select advances, restored when its guess missed.
  if (speculate_) {
    SaveOwnState(&p.own);
    if (then_) then_->SaveState(&p.quantizer);
  }
  err_.Clear(stream);
  p.kept = Select(in, n, ctx, stream);

  std::string head;
  ByteWriter w(&head);
  w.Put<uint8_t>(static_cast<uint8_t>(coding_));
  w.PutVarint(static_cast<uint64_t>(p.kept.k));
  if (coding_ == IndexCoding::kSeeded) w.Put<uint64_t>(p.kept.seed);

  const uint8_t* value_bytes = reinterpret_cast<const uint8_t*>(p.kept.values);
  p.value_size = static_cast<int64_t>(4 * p.kept.k);
  if (then_) {
    // An aligned buffer of its own: the quantizer's payload starts at any byte of ours.
    p.value_size = static_cast<int64_t>(then_->EncodedBytes(p.kept.k));
    uint8_t* q = quantized_.as<uint8_t>(std::max<int64_t>(p.value_size, 1));
    then_->EncodeAsync(p.kept.values, p.kept.k, ctx, q, err_.device(), stream);
    value_bytes = q;
  }
  const uint8_t* index_bytes = nullptr;
  if (coding_ == IndexCoding::kInt32) {
    index_bytes = reinterpret_cast<const uint8_t*>(p.kept.indices);
    p.index_size = 4 * p.kept.k;
  } else if (coding_ == IndexCoding::kDelta && p.kept.k > 0) {
    index_bytes = delta_.Encode(p.kept.indices, p.kept.k, stream);
    // The varints' size is known once the stream has run. Copying their bound (5k bytes) and
    // moving the values down afterwards saves a wait; for large payloads the extra copy and
    // the move cost more than the wait.
    p.moved = OneWait(p.kept.k, p.value_size);
    p.index_size = p.moved ? 5 * p.kept.k : delta_.Wait(stream);
  }

  p.head = head.size();
  out->Resize(p.head + static_cast<size_t>(p.index_size + p.value_size));
  std::memcpy(out->data(), head.data(), head.size());
  char* dst = out->data() + p.head;
  if (p.index_size > 0)
    CheckCuda(cudaMemcpyAsync(dst, index_bytes, static_cast<size_t>(p.index_size),
                              cudaMemcpyDeviceToHost, stream),
              "sparsifier: copy indices");
  if (p.value_size > 0)
    CheckCuda(cudaMemcpyAsync(dst + p.index_size, value_bytes, static_cast<size_t>(p.value_size),
                              cudaMemcpyDeviceToHost, stream),
              "sparsifier: copy values");
  p.queued = true;
}

bool DeviceSparsifier::QueuesWithoutWait(int64_t n) const {
  if (!speculate_) return false;  // Select reads its survivor count
  const int64_t k = KnownK(n);
  if (k < 0) return false;
  if (coding_ != IndexCoding::kDelta || k == 0) return true;
  return OneWait(k, then_ ? static_cast<int64_t>(then_->EncodedBytes(k)) : 4 * k);
}

void DeviceSparsifier::EncodeFinish() {
  GP_ENFORCE_AS(Internal, pending_.queued, Name(), ": EncodeFinish without EncodeAsync");
  Pending p = std::move(pending_);
  pending_ = Pending{};
  err_.Check(p.stream, Name());  // synchronises the stream, which queued the copies before it
  if (selector_.Missed()) {      // fewer survivors than k, or more than the buffer held
    LoadOwnState(p.own);
    if (then_) then_->LoadState(p.quantizer);
    speculate_ = false;
    struct Again {  // speculation is back on for the next encode, even after a throw
      bool* on;
      ~Again() { *on = true; }
    } again{&speculate_};  // (Missed() is true only where speculation was on)
    Encode(p.in, p.n, p.ctx, p.out, p.stream);
    return;
  }
  char* dst = p.out->data() + p.head;
  if (p.moved) {
    const int64_t varints = delta_.Total();
    std::memmove(dst + varints, dst + p.index_size, static_cast<size_t>(p.value_size));
    p.index_size = varints;
    p.out->Resize(p.head + static_cast<size_t>(p.index_size + p.value_size));
  }
  if (then_) last_quantized_.assign(dst + p.index_size, static_cast<size_t>(p.value_size));
  last_ = p.kept;
  last_n_ = p.n;
}

const int* DeviceSparsifier::DecodeAsync(std::string_view bytes, int64_t n, float* out,
                                         Stream stream) {
  const std::string name = Name();
  GP_ENFORCE(n >= 0 && n <= kMaxNumel, name, ": numel ", n, " is outside [0, 2^31-1]");
  GP_ENFORCE(bytes.size() <= static_cast<size_t>(kMaxNumel), name, ": a payload of ", bytes.size(),
             " bytes is above the 2^31-1 the device decoder takes");
  ByteReader r(bytes, name.c_str());
  const auto coding = r.Get<uint8_t>("index coding");
  if (coding_ == IndexCoding::kSeeded)
    GP_ENFORCE(coding == static_cast<uint8_t>(IndexCoding::kSeeded), name_, ": index coding ",
               int{coding}, " is not seeded (2)");
  const uint64_t k_raw = r.GetVarint("k");
  GP_ENFORCE(k_raw <= static_cast<uint64_t>(n), name, ": k=", k_raw, " exceeds numel ", n);
  GP_ENFORCE(coding_ == IndexCoding::kSeeded || coding == 0 || coding == 1, name,
             ": unknown index coding ", int{coding});
  const auto k = static_cast<int64_t>(k_raw);

  // What the host can check before any upload: the sizes of the parts it can already place.
  uint64_t seed = 0;
  size_t index_at = r.position(), index_len = 0;
  if (coding == static_cast<uint8_t>(IndexCoding::kSeeded)) {
    seed = r.Get<uint64_t>("seed");
  } else if (coding == static_cast<uint8_t>(IndexCoding::kInt32)) {
    index_len = static_cast<size_t>(4 * k);
    r.GetBytes(index_len, "int32 indices");
  } else if (!then_ && k > 0) {  // delta, the values are the last 4k bytes
    GP_ENFORCE(r.remaining() >= static_cast<size_t>(5 * k), name, ": truncated: ", r.remaining(),
               " bytes after k=", k, " cannot hold its indices and values");
    index_len = r.remaining() - static_cast<size_t>(4 * k);
    r.GetBytes(index_len, "index varints");
  }
  if (coding == static_cast<uint8_t>(IndexCoding::kDelta) && then_ && k > 0) {
    // The quantizer's payload starts after the k-th varint: found among the next 10k bytes of
    // the host copy (a longer varint is malformed anyway), with no device round trip.
    const auto window = static_cast<int64_t>(
        std::min<uint64_t>(r.remaining(), static_cast<uint64_t>(kMaxVarintBytes * k)));
    const int64_t len =
        VarintsLength(reinterpret_cast<const uint8_t*>(bytes.data()) + index_at, window, k);
    GP_ENFORCE(len > 0, name, ": ", DecodeErrorText(kIndexCount));
    index_len = static_cast<size_t>(len);
    r.GetBytes(index_len, "index varints");
  }
  const size_t values_at = r.position();
  if (!then_) {
    r.GetBytes(static_cast<size_t>(4 * k), "values");
    r.ExpectEnd();
  }

  err_.Clear(stream);
  int* err = err_.device();
  // The kernels read indices and values, the quantizer its whole payload, from this copy.
  const uint8_t* dev = then_ || k > 0 ? UploadBytes(bytes, &upload_, stream) : nullptr;
  if (n > 0)
    CheckCuda(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * sizeof(float), stream),
              "sparsifier: zero-fill");
  const int64_t* pos = nullptr;
  if (k == 0)
    pos = nullptr;  // nothing to scatter
  else if (coding == static_cast<uint8_t>(IndexCoding::kSeeded))
    pos = decoder_.Stratified(Rng(seed).state(), k, n, stream);
  else if (coding == static_cast<uint8_t>(IndexCoding::kInt32))
    pos = decoder_.Int32(dev + index_at, k, n, err, stream);
  else
    pos = decoder_.Delta(dev + index_at, static_cast<int64_t>(index_len), k, n, err, stream);

  if (then_) {
    float* values = values_.as<float>(std::max<int64_t>(k, 1));
    then_->DecodeAsync(r.Rest(), dev + values_at, k, values, err, stream);
    ScatterAsync(pos, values, nullptr, k, n, out, err, stream);
  } else if (k > 0) {
    ScatterAsync(pos, nullptr, dev + values_at, k, n, out, err, stream);
  }
  return err;
}

void DeviceSparsifier::SubtractDecoded(float* e, int64_t n, Stream stream) {
  GP_ENFORCE(last_n_ >= 0 && n == last_n_, Name(),
             ": SubtractDecoded needs the numel of the last Encode (", last_n_, "), got ", n);
  if (last_.k == 0) return;
  const float* values = last_.values;
  if (then_) {
    // What the receiver decodes: the quantizer's payload of the kept values.
    float* decoded = values_.as<float>(last_.k);
    then_->DecodeAsync(last_quantized_, quantized_.data(), last_.k, decoded, err_.device(), stream);
    values = decoded;
  }
  SubtractAtAsync(last_.indices, values, last_.k, e, stream);
}

void DeviceSparsifier::SaveState(std::string* out) const {
  if (!then_) {
    SaveOwnState(out);
    return;
  }
  // Pipeline's layout: varint length + the sparsifier's state, then the quantizer's.
  std::string own;
  SaveOwnState(&own);
  ByteWriter w(out);
  w.PutVarint(own.size());
  w.PutBytes(own.data(), own.size());
  then_->SaveState(out);
}

void DeviceSparsifier::LoadState(std::string_view in) {
  if (!then_) {
    LoadOwnState(in);
    return;
  }
  ByteReader r(in, "pipeline state");
  const uint64_t len = r.GetVarint("sparsifier state length");
  GP_ENFORCE(len <= r.remaining(), "pipeline state: sparsifier state of ", len, " bytes, ",
             r.remaining(), " left");
  LoadOwnState(r.GetBytes(static_cast<size_t>(len), "sparsifier state"));
  then_->LoadState(r.Rest());
}

void DeviceSparsifier::LoadOwnState(std::string_view in) {
  GP_ENFORCE(in.empty(), name_, " keeps no state, but the checkpoint holds ", in.size(),
             " bytes of it (a different codec?)");
}

}  // namespace gradpress::compressors::cuda
