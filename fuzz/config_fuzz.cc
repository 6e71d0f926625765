// gradpress-fuzz-config: the experiment config parser on arbitrary YAML text, and the codecs
// a config describes built from its fuzzed parameters.
//
// Input: YAML text; after a NUL byte, NUL-separated overrides ("train.lr=0.05").
// Oracles besides the sanitizers: only gradpress::Error may be thrown (yaml-cpp's own
// exceptions are the parser's to translate); a config that parses round-trips through ToYaml
// to an equal config with the same ConfigHash; its push and pull codecs, if MakeCompressor
// accepts them, encode and decode a small tensor.
// Seeds: the configs/*.yaml files (copied by scripts/fuzz.sh).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "fuzz/fuzz_util.h"

namespace gradpress::fuzz {
namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "gradpress-fuzz-config: oracle failed: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void TryCodec(const CodecSpec& spec) {
  std::unique_ptr<compressors::Compressor> c;
  try {
    c = compressors::MakeCompressor(spec);
  } catch (const Error&) {
    return;  // parameters are checked by MakeCompressor, not by the parser
  }
  for (int64_t n : {0, 5, 300}) {
    const std::vector<float> x = Floats(n, static_cast<uint32_t>(n));
    std::vector<float> out(n);
    const std::string bytes = c->EncodeBytes(x.data(), n, {"layer0", 1});
    c->DecodeTo(bytes, n, out.data());
  }
}

}  // namespace
}  // namespace gradpress::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  gradpress::compressors::RegisterBuiltinCompressors();
  gradpress::fuzz::Quiet();
  gradpress::fuzz::Seeds seeds(argc, argv);
  if (seeds) {
    seeds.Write("config-default", gradpress::ToYaml(gradpress::Config{}));
    seeds.Done();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradpress;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.push_back(input.substr(at + 1, next == std::string::npos ? next : next - at - 1));
    at = next;
  }
  Config c;
  try {
    c = ParseConfig(text, "fuzz.yaml", overrides);
  } catch (const Error&) {
    return 0;
  }
  const std::string yaml = ToYaml(c);
  Config back;
  try {
    back = ParseConfig(yaml, "resolved.yaml");
  } catch (const Error& e) {
    fuzz::Fail("the resolved config does not parse", yaml + "\n" + e.what());
  }
  if (back != c) fuzz::Fail("the resolved config parses to another config", yaml);
  if (ConfigHash(back) != ConfigHash(c)) fuzz::Fail("the resolved config's hash differs", yaml);
  try {
    fuzz::TryCodec(c.push);
    fuzz::TryCodec(c.pull);
  } catch (const Error&) {
  }
  return 0;
}
