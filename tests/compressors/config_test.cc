#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "compressors/compressor_config.h"
#include "compressors/error_feedback.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

TEST_CASE("a YAML push block builds codec, pipeline and error feedback", "[config]") {
  RegisterBuiltinCompressors();
  const auto node = YAML::Load(
      "{codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}");
  CompressorConfig c = ParseCompressorConfig(node, "push");
  CHECK(c.codec == "topk");
  CHECK(c.params.at("ratio") == "0.01");
  REQUIRE(c.then);
  CHECK(c.then->codec == "qsgd");
  CHECK(c.error_feedback);
  auto comp = MakeCompressor(c);
  CHECK(comp->Name() == "topk+qsgd");
  CHECK(dynamic_cast<ErrorFeedback*>(comp.get()) != nullptr);
}

TEST_CASE("bad codec configs are errors that name the problem", "[config]") {
  RegisterBuiltinCompressors();
  auto make = [](const std::string& spec) { return MakeCompressor(ParseCompressorSpec(spec)); };
  CHECK_THROWS_WITH(make("zstd"), Catch::Contains("unknown codec 'zstd'") &&
                                      Catch::Contains("qsgd") && Catch::Contains("topk"));
  CHECK_THROWS_WITH(make("topk ratoi=0.1"),
                    Catch::Contains("no parameter 'ratoi'") && Catch::Contains("ratio"));
  CHECK_THROWS_WITH(make("qsgd levels=70000"), Catch::Contains("outside [1, 65535]"));
  CHECK_THROWS_WITH(make("qsgd levels=abc"), Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(make("qsgd norm=l1"), Catch::Contains("not one of"));
  CHECK_THROWS_WITH(make("topk ratio=0.1 k=5"), Catch::Contains("either ratio or k"));
  CompressorConfig c = ParseCompressorSpec("qsgd");
  c.then = std::make_shared<CompressorConfig>(ParseCompressorSpec("onebit"));
  CHECK_THROWS_WITH(MakeCompressor(c), Catch::Contains("'qsgd' is not one"));
  CHECK_THROWS_WITH(ParseCompressorConfig(YAML::Load("{ratio: 0.1}"), "pull"),
                    Catch::Contains("pull: missing 'codec'"));
  CHECK_THROWS_WITH(ParseCompressorConfig(YAML::Load("{codec: topk, ratio: [1, 2]}"), "push"),
                    Catch::Contains("push.ratio (line 1)"));
  CHECK_THROWS_AS(ParseCompressorConfig(YAML::Load("{codec: topk, error_feedback: maybe}")),
                  InvalidArgument);
}

TEST_CASE("ToString names codec, parameters and decorators", "[config]") {
  CompressorConfig c = ParseCompressorSpec("topk ratio=0.01 error_feedback=true");
  c.then = std::make_shared<CompressorConfig>(ParseCompressorSpec("qsgd levels=16"));
  CHECK(c.ToString() == "topk(ratio=0.01)+qsgd(levels=16)+ef");
}

}  // namespace
}  // namespace gradpress::compressors
