#include "worker/engine/compression_schedule.h"

#include <catch2/catch.hpp>

#include "common/error.h"

namespace gradpress::worker {
namespace {

TEST_CASE("DGC's sparsity warm-up: 75%, 93.75%, 98.4375%, 99.6%, then the target", "[dgc]") {
  const double target = 0.001;
  CHECK(WarmupDensity(target, 4, 0) == 0.25);
  CHECK(WarmupDensity(target, 4, 1) == 0.0625);
  CHECK(WarmupDensity(target, 4, 2) == 0.015625);
  CHECK(WarmupDensity(target, 4, 3) == Approx(0.00390625));  // sparsity 99.6%
  CHECK(WarmupDensity(target, 4, 4) == target);              // 99.9%
  CHECK(WarmupDensity(target, 4, 9) == target);
  CHECK(WarmupDensity(0.1, 4, 1) == 0.1);  // never sparser than the target
  CHECK(WarmupDensity(target, 0, 0) == target);
  CHECK_THROWS_AS(WarmupDensity(0, 4, 0), InvalidArgument);
}

TEST_CASE("ladders split on '|'", "[dynamic]") {
  CHECK(SplitLadder(" qsgd levels=7 | qsgd levels=127 ") ==
        std::vector<std::string>{"qsgd levels=7", "qsgd levels=127"});
  CHECK(SplitLadder("fp16") == std::vector<std::string>{"fp16"});
  CHECK_THROWS_AS(SplitLadder("qsgd || fp16"), InvalidArgument);
  CHECK_THROWS_AS(SplitLadder(""), InvalidArgument);
}

TEST_CASE("the dynamic controller's transitions on a scripted accuracy and loss sequence",
          "[dynamic]") {
  DynamicCompressionConfig c;
  c.ladder = "q4 | q8 | q16";  // specs are opaque to the controller
  c.acc_threshold = 0.01;
  c.loss_threshold = 0.05;
  c.patience = 3;
  c.uncompressed_epochs = 2;
  CompressionController ctl(c);
  CHECK(ctl.current().spec == "q4");
  struct Step {
    double acc, loss;
    std::string spec;
    bool changed;
  };
  // epoch: (acc, loss) -> spec after the update
  const std::vector<Step> script = {
      {0.50, 1.00, "q4", false},     // first epoch: nothing to compare
      {0.60, 0.80, "q4", false},     // +0.10 acc, -20% loss: progressing
      {0.605, 0.79, "q8", true},     // +0.005 < 0.01 and -1.25% < 5%: stalled -> more bits
      {0.65, 0.60, "q8", false},     // progressing
      {0.70, 0.50, "q8", false},     // progressing (2 epochs on q8)
      {0.75, 0.40, "none", true},    // 3rd epoch on q8 = patience: no compression for 2 epochs
      {0.76, 0.39, "none", false},   // window epoch 1 (no rule applies inside the window)
      {0.77, 0.38, "q8", true},      // window over: back to the rung it left
      {0.775, 0.379, "q16", true},   // stalled -> top rung
      {0.776, 0.378, "none", true},  // stalled on the top rung -> no compression
  };
  for (size_t e = 0; e < script.size(); ++e) {
    INFO("epoch " << e);
    const CompressionDecision d = ctl.Update(script[e].acc, script[e].loss);
    CHECK(d.spec == script[e].spec);
    CHECK(d.changed == script[e].changed);
    CHECK(d.changed == !d.reason.empty());
  }
}

TEST_CASE("a loss that still falls fast keeps the rung even without accuracy gain", "[dynamic]") {
  DynamicCompressionConfig c;
  c.ladder = "a | b";
  c.acc_threshold = 0.01;
  c.loss_threshold = 0.05;
  c.patience = 10;
  CompressionController ctl(c);
  ctl.Update(0.5, 1.0);
  CHECK(ctl.Update(0.5, 0.9).spec == "a");   // loss -10%: not stalled
  CHECK(ctl.Update(0.5, 0.89).spec == "b");  // loss -1.1% and no gain: stalled
}

}  // namespace
}  // namespace gradpress::worker
