#include "worker/engine/compression_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"

namespace gradpress::worker {

double WarmupDensity(double target, int warmup_epochs, int64_t epoch) {
  GP_ENFORCE(target > 0 && target <= 1, "density ", target, " is not in (0, 1]");
  if (epoch >= warmup_epochs || epoch < 0) return target;
  return std::max(target, std::pow(0.25, static_cast<double>(epoch + 1)));
}

std::vector<std::string> SplitLadder(const std::string& ladder) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= ladder.size()) {
    size_t end = ladder.find('|', begin);
    if (end == std::string::npos) end = ladder.size();
    std::string item = ladder.substr(begin, end - begin);
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    GP_ENFORCE(b != std::string::npos, "compress.dynamic.ladder '", ladder,
               "' has an empty entry (entries are codec specs separated by '|')");
    out.push_back(item.substr(b, e - b + 1));
    begin = end + 1;
  }
  return out;
}

CompressionController::CompressionController(const DynamicCompressionConfig& config)
    : config_(config), ladder_(SplitLadder(config.ladder)) {
  GP_ENFORCE(config_.patience >= 1, "compress.dynamic.patience must be >= 1");
}

CompressionDecision CompressionController::current() const {
  CompressionDecision d;
  d.rung = rung_;
  d.uncompressed = uncompressed_left_ > 0;
  d.spec = d.uncompressed ? "none" : ladder_[rung_];
  return d;
}

CompressionDecision CompressionController::Update(double test_acc, double train_loss) {
  const CompressionDecision before = current();
  char why[160];
  std::string reason;
  if (uncompressed_left_ > 0) {
    if (--uncompressed_left_ == 0) {
      epochs_on_rung_ = 0;
      reason = "no-compression window over: back to rung " + std::to_string(rung_);
    }
  } else {
    ++epochs_on_rung_;
    bool stalled = false;
    if (have_previous_) {
      const double gain = test_acc - previous_acc_;
      const double drop = previous_loss_ > 0 ? (previous_loss_ - train_loss) / previous_loss_ : 0.0;
      stalled = gain < config_.acc_threshold && drop < config_.loss_threshold;
      std::snprintf(why, sizeof(why), "acc %+.4f (< %g: %s), loss %+.2f%% (< %g%%: %s)", gain,
                    config_.acc_threshold, gain < config_.acc_threshold ? "yes" : "no", -100 * drop,
                    100 * config_.loss_threshold, drop < config_.loss_threshold ? "yes" : "no");
    }
    const bool top = rung_ + 1 == static_cast<int>(ladder_.size());
    if (stalled && !top) {
      ++rung_;
      epochs_on_rung_ = 0;
      reason = std::string("stalled (") + why + "): up to rung " + std::to_string(rung_);
    } else if ((stalled && top) || epochs_on_rung_ >= config_.patience) {
      uncompressed_left_ = config_.uncompressed_epochs;
      epochs_on_rung_ = 0;
      reason = stalled ? std::string("stalled on the top rung (") + why + ")"
                       : "on rung " + std::to_string(rung_) + " for " +
                             std::to_string(config_.patience) + " epochs";
      reason += ": no compression for " + std::to_string(config_.uncompressed_epochs) + " epoch" +
                (config_.uncompressed_epochs == 1 ? "" : "s");
    }
  }
  have_previous_ = true;
  previous_acc_ = test_acc;
  previous_loss_ = train_loss;
  CompressionDecision d = current();
  d.changed = d.spec != before.spec;
  d.reason = reason;
  return d;
}

}  // namespace gradpress::worker
