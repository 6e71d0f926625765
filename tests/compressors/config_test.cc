#include "common/error.h"
#include "compressors/compressor_config.h"
#include "compressors/error_feedback.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

TEST_CASE("bad codec configs are errors that name the problem", "[config]") {
  RegisterBuiltinCompressors();
  auto make = [](const std::string& spec) { return MakeCompressor(ParseCodecShorthand(spec)); };
  CHECK_THROWS_WITH(make("zstd"), Catch::Contains("unknown codec 'zstd'") &&
                                      Catch::Contains("qsgd") && Catch::Contains("topk"));
  CHECK_THROWS_WITH(make("topk ratoi=0.1"),
                    Catch::Contains("no parameter 'ratoi'") && Catch::Contains("ratio"));
  CHECK_THROWS_WITH(make("qsgd levels=70000"), Catch::Contains("outside [1, 65535]"));
  CHECK_THROWS_WITH(make("qsgd levels=abc"), Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(make("qsgd norm=l1"), Catch::Contains("not one of"));
  CHECK_THROWS_WITH(make("topk ratio=0.1 k=5"), Catch::Contains("either ratio or k"));
  CHECK_THROWS_WITH(make("qsgd then=onebit"), Catch::Contains("'qsgd' is not one"));
}

TEST_CASE("ToString names codec, parameters and decorators", "[config]") {
  const CodecSpec c =
      ParseCodecShorthand("topk ratio=0.01 error_feedback=true then=qsgd levels=16");
  CHECK(c.ToString() == "topk(ratio=0.01)+qsgd(levels=16)+ef");
}

}  // namespace
}  // namespace gradpress::compressors
