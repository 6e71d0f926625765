// The config's cross-key rules (config_schema.h: ValidateConfig), checked once the file and
// every override are applied, and again by a worker given a Config built in code.
#include <string>
#include <utility>

#include "common/config_schema.h"
#include "common/error.h"

namespace gradpress::detail {
namespace {

void CheckCodecNamed(const CodecSpec& spec, const std::string& key) {
  if (spec.codec.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InvalidArgument(key + ": missing 'codec' (e.g. " + key + ".codec=qsgd)");
  }
  if (spec.then) CheckCodecNamed(*spec.then, key + ".then");
}

// compress.auto picks each key's push codec once, for the step the model predicts.
void CheckAuto(const Config& c) {
  const CompressConfig& a = c.compress;
  if (!a.auto_select) return;
  GP_ENFORCE(a.link_gbps > 0,
             "compress.auto needs compress.link_gbps: the link rate (Gbit/s) to choose for");
  GP_ENFORCE(c.push.codec != "none",
             "compress.auto chooses between none, fp16 and the push codec: set push.codec to the "
             "compressing one (e.g. push=topk ratio=0.01)");
  GP_ENFORCE(c.sync.mode == "sync" && c.sync.every == 1,
             "compress.auto predicts a synchronous step that exchanges every step: it needs "
             "sync.mode sync and sync.every 1");
  GP_ENFORCE(a.dynamic.ladder.empty() && a.warmup_epochs == 0 && a.momentum_correction == 0,
             "compress.auto fixes each key's push codec: it does not combine with "
             "compress.dynamic.ladder, compress.warmup_epochs or compress.momentum_correction");
}

// How the sync keys, the exchange and the compression options combine (methods 1-6).
void CheckTraining(const Config& c) {
  const SyncConfig& y = c.sync;
  GP_ENFORCE(y.mode == "sync" || (y.exchange == "weights" && y.every == 1),
             "sync.mode async applies each push to the server's weights at once: it needs "
             "sync.exchange: weights and sync.every: 1 (methods 1-2)");
  // (So gaussian averaging runs in sync mode with sync.every 1.)
  GP_ENFORCE(y.every == 1 || y.exchange == "gradients", "sync.every ", y.every,
             " (method 6) needs sync.exchange: gradients");
  const bool dgc = c.compress.momentum_correction > 0;
  GP_ENFORCE(!dgc || (y.exchange == "gradients" && y.every == 1),
             "compress.momentum_correction (DGC) needs sync.exchange: gradients and sync.every: 1");
  GP_ENFORCE(!dgc || !c.push.error_feedback,
             "compress.momentum_correction keeps the unsent remainder itself: set "
             "push.error_feedback: false");
  GP_ENFORCE(c.compress.dynamic.ladder.empty() || (!dgc && c.compress.warmup_epochs == 0),
             "compress.dynamic.ladder replaces the push codec: it does not combine with DGC's "
             "momentum correction or warm-up");
  GP_ENFORCE(c.compress.warmup_epochs == 0 || c.push.params.count("ratio") > 0,
             "compress.warmup_epochs needs push.ratio (the density the warm-up ends at)");
  CheckAuto(c);
  GP_ENFORCE((c.model == "torchscript") == !c.model_path.empty(),
             c.model == "torchscript"
                 ? "model torchscript needs model.path: the file torch.jit.script(model).save wrote"
                 : "model_path is set but model is '" + c.model +
                       "': use model: {name: torchscript, path: ...}");
}

}  // namespace

void ValidateConfig(const Config& c) {
  CheckCodecNamed(c.push, "push");
  CheckCodecNamed(c.pull, "pull");
  CheckTraining(c);
  if (c.train.lr_schedule == "step" && c.train.lr_step_epochs < 1) {
    throw InvalidArgument("train.lr_schedule is 'step': set train.lr_step_epochs >= 1");
  }
  const SecurityConfig& s = c.security;
  if (!s.tls) {  // certificates without TLS would protect nothing: say so rather than ignore
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"cert", &s.cert},
                                     {"key", &s.key},
                                     {"ca", &s.ca},
                                     {"client_ca", &s.client_ca},
                                     {"client_cert", &s.client_cert},
                                     {"client_key", &s.client_key},
                                     {"server_name", &s.server_name}}) {
      if (!value->empty()) {
        throw InvalidArgument(std::string("security.") + key + " is set but security.tls is " +
                              "false: set security.tls=true (or remove security." + key + ")");
      }
    }
  }
  if (s.cert.empty() != s.key.empty()) {
    throw InvalidArgument("security.cert and security.key go together: set both or neither");
  }
  if (s.client_cert.empty() != s.client_key.empty()) {
    throw InvalidArgument(
        "security.client_cert and security.client_key go together: set both or neither");
  }
}

}  // namespace gradpress::detail
