#include "common/config.h"
#include "compressors/compressor_config.h"
#include "compressors/error_feedback.h"
#include "compressors/registry.h"
#include "tests/catch_torch.h"

namespace gradpress::compressors {
namespace {

TEST_CASE("FromCodecSpec turns a config codec block into a buildable CompressorConfig",
          "[config]") {
  RegisterBuiltinCompressors();
  const Config config = ParseConfig(
      "push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}\n",
      "m5.yaml", {"push.then.levels=8"});
  const CompressorConfig c = FromCodecSpec(config.push);
  CHECK(c.codec == "topk");
  CHECK(c.params.at("ratio") == "0.01");
  CHECK(c.error_feedback);
  REQUIRE(c.then);
  CHECK(c.then->codec == "qsgd");
  CHECK(c.then->params.at("levels") == "8");
  CHECK_FALSE(c.then->then);
  CHECK(c.ToString() == "topk(ratio=0.01)+qsgd(levels=8)+ef");
  auto comp = MakeCompressor(c);
  CHECK(comp->Name() == "topk+qsgd");
  CHECK(dynamic_cast<ErrorFeedback*>(comp.get()) != nullptr);

  // The default block is the identity codec.
  CHECK(MakeCompressor(FromCodecSpec(config.pull))->Name() == "none");
  // Parameters are the factory's to check, not the config's.
  const Config typo = ParseConfig("", "x", {"pull.codec=qsgd", "pull.levles=8"});
  CHECK_THROWS_WITH(MakeCompressor(FromCodecSpec(typo.pull)),
                    Catch::Contains("no parameter 'levles'"));
}

}  // namespace
}  // namespace gradpress::compressors
