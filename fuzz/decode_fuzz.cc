// gradpress-fuzz-decode: every registered codec's Decode and LoadState on arbitrary bytes.
//
// Input: [codec index][mode][u16 numel] then the payload (or the state) bytes.
//   mode bit 0 = 0: MakeDecoder(codec).DecodeTo(bytes, numel) -- the server's decode of a push
//                   and the worker's decode of a pull; a success must write finite or
//                   non-finite floats but never read or write out of bounds.
//   mode bit 0 = 1: MakeCompressor(codec (+ error feedback if bit 1) (+ momentum correction
//                   if bit 2)).LoadState(bytes), and on success an Encode of numel floats and
//                   SaveState (restored checkpoints of any size meet tensors of any size).
// Errors must be gradpress::Error; anything else (another exception, a crash, UB, a leak)
// is a finding.
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"
#include "compressors/sparsifier.h"
#include "fuzz/fuzz_util.h"

namespace gradpress::fuzz {
namespace {

// "qsgd" or "topk+qsgd": every codec, and every sparsifier followed by every other codec.
const std::vector<std::string>& Codecs() {
  static const std::vector<std::string> codecs = [] {
    compressors::RegisterBuiltinCompressors();
    std::vector<std::string> names = compressors::RegisteredCompressorNames(), sparse, dense;
    for (const auto& n : names) {
      CodecSpec c;
      c.codec = n;
      auto codec = compressors::MakeCompressor(c);
      (dynamic_cast<compressors::Sparsifier*>(codec.get()) ? sparse : dense).push_back(n);
    }
    for (const auto& s : sparse) {
      for (const auto& q : dense) {
        try {
          compressors::MakeDecoder(s + "+" + q);
          names.push_back(s + "+" + q);
        } catch (const Error&) {
        }
      }
    }
    return names;
  }();
  return codecs;
}

CodecSpec ConfigOf(const std::string& name, bool error_feedback) {
  CodecSpec c;
  const auto plus = name.find('+');
  c.codec = name.substr(0, plus);
  if (plus != std::string::npos) {
    c.then = std::make_shared<CodecSpec>();
    c.then->codec = name.substr(plus + 1);
  }
  c.error_feedback = error_feedback;
  return c;
}

std::unique_ptr<compressors::Compressor> Make(const std::string& name, uint8_t mode) {
  auto c = compressors::MakeCompressor(ConfigOf(name, mode & 2));
  if (mode & 4) c = std::make_unique<compressors::MomentumCorrection>(std::move(c), 0.9);
  return c;
}

std::string Input(size_t codec, uint8_t mode, uint16_t numel, const std::string& bytes) {
  std::string s;
  s.push_back(static_cast<char>(codec));
  s.push_back(static_cast<char>(mode));
  PutU16(numel, &s);
  return s + bytes;
}

void WriteSeeds(Seeds& seeds) {
  const auto& codecs = Codecs();
  for (size_t i = 0; i < codecs.size(); ++i) {
    for (uint16_t n : {0, 1, 7, 100, 1500}) {
      for (uint8_t mode : {0, 1, 3, 5}) {
        auto c = Make(codecs[i], mode);
        std::string bytes;
        for (int step = 0; step < 2; ++step) {
          const std::vector<float> x = Floats(n, static_cast<uint32_t>(i * 7 + n + step));
          bytes = c->EncodeBytes(x.data(), n, {"layer0", step});
        }
        if (mode & 1) {  // the state after two steps
          bytes.clear();
          c->SaveState(&bytes);
        }
        seeds.Write("decode-" + codecs[i] + "-" + std::to_string(n) + "-m" + std::to_string(mode),
                    Input(i, mode, n, bytes));
      }
    }
  }
}

}  // namespace
}  // namespace gradpress::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace gradpress::fuzz;
  Codecs();
  Initialize(argc, argv, WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradpress::fuzz;
  FuzzInput in(data, size);
  const auto& codecs = Codecs();
  const std::string& name = codecs[in.Byte() % codecs.size()];
  const uint8_t mode = in.Byte();
  const int64_t n = in.U16();
  const std::string bytes(in.Rest());  // its own allocation: reads past it are caught
  std::vector<float> out(n);
  try {
    if (!(mode & 1)) {
      auto d = gradpress::compressors::MakeDecoder(name);
      d->DecodeTo(bytes, n, out.data());
      return 0;
    }
    auto c = Make(name, mode);
    c->LoadState(bytes);
    const std::vector<float> x = Floats(n, mode);
    const std::string encoded = c->EncodeBytes(x.data(), n, {"layer0", 3});
    c->DecodeTo(encoded, n, out.data());
    std::string state;
    c->SaveState(&state);
  } catch (const gradpress::Error&) {
  }
  return 0;
}
