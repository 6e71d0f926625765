// CodecSpec (common/codec_spec.h) is the one description of a codec: the config's blocks, the
// shorthand and the YAML emitter all produce it, and MakeCompressor builds from it directly.
#include "common/codec_spec.h"

#include <yaml-cpp/yaml.h>

#include "common/config.h"
#include "common/error.h"
#include "common/yaml_source.h"
#include "compressors/error_feedback.h"
#include "compressors/registry.h"
#include "tests/catch_torch.h"

namespace gradpress::compressors {
namespace {

TEST_CASE("a config codec block builds its compressor with no conversion", "[config]") {
  RegisterBuiltinCompressors();
  const Config config = ParseConfig(
      "push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}\n",
      "m5.yaml", {"push.then.levels=8"});
  const CodecSpec& c = config.push;
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
  CHECK(MakeCompressor(config.pull)->Name() == "none");
  // Parameters are the factory's to check, not the config's.
  const Config typo = ParseConfig("", "x", {"pull.codec=qsgd", "pull.levles=8"});
  CHECK_THROWS_WITH(MakeCompressor(typo.pull), Catch::Contains("no parameter 'levles'"));
}

TEST_CASE("the shorthand, the YAML block and the config agree on one spec", "[config]") {
  const CodecSpec shorthand =
      ParseCodecShorthand("topk ratio=0.01 error_feedback=true then=qsgd levels=16");
  const CodecSpec yaml =
      ParseCodecSpec(YAML::Load("{codec: topk, ratio: 0.01, error_feedback: true, "
                                "then: {codec: qsgd, levels: 16}}"),
                     "push", YamlSource{"x.yaml"});
  const Config config = ParseConfig(
      "push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}\n");
  CHECK(shorthand == yaml);
  CHECK(shorthand == config.push);
  REQUIRE(shorthand.then);
  CHECK(shorthand.then->params.at("levels") == "16");
  CHECK_FALSE(shorthand.then->error_feedback);

  // Each writer's output reads back to the same spec.
  CHECK(ParseCodecShorthand(shorthand.ToShorthand()) == shorthand);
  YAML::Emitter out;
  EmitCodecSpec(out, shorthand);
  CHECK(ParseCodecSpec(YAML::Load(out.c_str()), "push", YamlSource{"y"}) == shorthand);
  CHECK(shorthand.ToString() == "topk(ratio=0.01)+qsgd(levels=16)+ef");

  // A bare name is a block of its own.
  CHECK(ParseCodecSpec(YAML::Load("qsgd"), "pull", YamlSource{"z"}).codec == "qsgd");
  CHECK(ParseCodecShorthand("none") == CodecSpec{});
}

TEST_CASE("bad codec specs are errors that name where and what", "[config]") {
  CHECK_THROWS_WITH(ParseCodecSpec(YAML::Load("{ratio: 0.1}"), "pull", YamlSource{"a.yaml"}),
                    Catch::Contains("a.yaml:1: pull: missing 'codec'"));
  CHECK_THROWS_WITH(
      ParseCodecSpec(YAML::Load("{codec: topk, ratio: [1, 2]}"), "push", YamlSource{"a.yaml"}),
      Catch::Contains("a.yaml:1: push.ratio: expected a value, got a list"));
  CHECK_THROWS_WITH(ParseCodecSpec(YAML::Load("{codec: topk, error_feedback: maybe}"), "push",
                                   YamlSource{"--set push={...}", true}),
                    Catch::Contains("--set push={...}: expected true or false, got 'maybe'"));
  CHECK_THROWS_WITH(ParseCodecSpec(YAML::Load("[topk]"), "push", YamlSource{"a.yaml"}),
                    Catch::Contains("expected a codec block"));
  CHECK_THROWS_WITH(ParseCodecShorthand(""), Catch::Contains("empty codec spec"));
  CHECK_THROWS_WITH(ParseCodecShorthand("topk ratio"), Catch::Contains("expected key=value"));
  CHECK_THROWS_WITH(ParseCodecShorthand("ratio=0.1"), Catch::Contains("starts with a codec"));
  CHECK_THROWS_WITH(ParseCodecShorthand("topk then="), Catch::Contains("then= needs a codec"));
  CHECK_THROWS_WITH(ParseCodecShorthand("topk error_feedback=sure"),
                    Catch::Contains("expected true or false, got 'sure'"));
}

}  // namespace
}  // namespace gradpress::compressors
