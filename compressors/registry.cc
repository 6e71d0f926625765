#include "compressors/registry.h"

#include <map>
#include <mutex>

#include "common/error.h"
#include "compressors/dgc.h"
#include "compressors/efsignsgd.h"
#include "compressors/error_feedback.h"
#include "compressors/fp16.h"
#include "compressors/gaussiank.h"
#include "compressors/int8.h"
#include "compressors/none.h"
#include "compressors/onebit.h"
#include "compressors/pipeline.h"
#include "compressors/powersgd.h"
#include "compressors/qsgd.h"
#include "compressors/randomk.h"
#include "compressors/signum.h"
#include "compressors/terngrad.h"
#include "compressors/threshold.h"
#include "compressors/topk.h"

namespace gradpress::compressors {
namespace {

std::map<std::string, CompressorFactory>& Registry() {
  static std::map<std::string, CompressorFactory> registry;
  return registry;
}

template <typename T>
void Register(const std::string& name) {
  RegisterCompressor(name, [](ParamReader& r) { return std::make_unique<T>(r); });
}

std::string KnownNames() {
  std::string s;
  for (const auto& name : RegisteredCompressorNames()) s += (s.empty() ? "" : ", ") + name;
  return s + ", and the preset " + kEfSignSgd;
}

}  // namespace

void RegisterCompressor(const std::string& name, CompressorFactory factory) {
  Registry()[name] = std::move(factory);
}

void RegisterBuiltinCompressors() {
  static std::once_flag once;
  std::call_once(once, [] {
    Register<NoneCompressor>("none");
    Register<Fp16Compressor>("fp16");
    Register<Int8Compressor>("int8");
    Register<QsgdCompressor>("qsgd");
    Register<TernGradCompressor>("terngrad");
    Register<OneBitCompressor>("onebit");
    Register<TopKCompressor>("topk");
    Register<RandomKCompressor>("randomk");
    Register<ThresholdCompressor>("threshold");
    Register<GaussianKCompressor>("gaussiank");
    Register<DgcCompressor>("dgc");
    Register<PowerSgdCompressor>("powersgd");
    Register<SignumCompressor>("signum");
  });
}

std::vector<std::string> RegisteredCompressorNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Compressor> MakeCompressor(const CodecSpec& config) {
  // Presets name a configured codec and have no factory of their own (efsignsgd.h).
  if (config.codec == kEfSignSgd) return MakeCompressor(ExpandEfSignSgd(config));
  auto it = Registry().find(config.codec);
  GP_ENFORCE(it != Registry().end(), "unknown codec '", config.codec,
             "'; known codecs: ", KnownNames());
  ParamReader reader(config);
  std::unique_ptr<Compressor> codec = it->second(reader);
  reader.Finish();
  if (config.then) {
    GP_ENFORCE(!config.then->error_feedback, "error_feedback belongs on the outer codec, not on '",
               config.then->codec, "' after 'then'");
    auto* sparsifier = dynamic_cast<Sparsifier*>(codec.get());
    GP_ENFORCE(sparsifier != nullptr, "'then' follows a sparsifier (topk, randomk, threshold, ",
               "gaussiank, dgc); '", config.codec, "' is not one");
    std::unique_ptr<Compressor> quantizer = MakeCompressor(*config.then);
    codec.release();
    codec =
        std::make_unique<Pipeline>(std::unique_ptr<Sparsifier>(sparsifier), std::move(quantizer));
  }
  if (config.error_feedback) codec = std::make_unique<ErrorFeedback>(std::move(codec));
  return codec;
}

CodecSpec DecoderSpec(const std::string& name) {
  const auto plus = name.find('+');
  CodecSpec config;
  config.codec = name.substr(0, plus);
  if (plus != std::string::npos) {
    config.then = std::make_shared<CodecSpec>();
    config.then->codec = name.substr(plus + 1);
    GP_ENFORCE(config.then->codec.find('+') == std::string::npos, "codec name '", name,
               "' has more than one '+'");
  }
  return config;
}

std::unique_ptr<Compressor> MakeDecoder(const std::string& name) {
  return MakeCompressor(DecoderSpec(name));
}

}  // namespace gradpress::compressors
