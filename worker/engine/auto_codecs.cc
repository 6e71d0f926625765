#include "worker/engine/auto_codecs.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"

namespace gradpress::worker {
namespace {

double StepMs(const KeyCalibration& k, const std::vector<int>& choice, const Cluster& cluster) {
  return PredictStep(Assemble(k, choice, "auto"), cluster).step_ms;
}

// The choice (see auto_codecs.h), its predicted step and each uniform choice's.
struct Chosen {
  std::vector<int> method;
  double step_ms = 0;
  std::vector<double> uniform_ms;
};

Chosen Choose(const KeyCalibration& k, const Cluster& cluster) {
  GP_ENFORCE(!k.cost.empty(), "compress.auto: no calibrated method to choose from");
  const int methods = static_cast<int>(k.cost.size());
  Chosen out;
  for (int m = 0; m < methods; ++m)
    out.uniform_ms.push_back(StepMs(k, std::vector<int>(k.keys(), m), cluster));
  const std::vector<double>& uniform_ms = out.uniform_ms;
  // 1. The shortest step: from the best uniform choice, one key at a time while it shortens.
  const int first =
      static_cast<int>(std::min_element(uniform_ms.begin(), uniform_ms.end()) - uniform_ms.begin());
  std::vector<int> choice(k.keys(), first);
  double shortest = uniform_ms[first];
  for (int sweep = 0, moved = 1; moved && sweep < 8; ++sweep) {
    moved = 0;
    for (size_t i = 0; i < k.keys(); ++i) {
      if (!k.Compressed(i)) continue;
      for (int m = 0; m < methods; ++m) {
        std::vector<int> trial = choice;
        trial[i] = m;
        const double ms = StepMs(k, trial, cluster);
        if (ms < shortest * (1 - 1e-12)) {
          choice = std::move(trial);
          shortest = ms;
          moved = 1;
        }
      }
    }
  }
  // 2. A more faithful uniform choice within kAutoTie of it wins: keys less faithful than it
  // take its codec (all of them, if the mix that leaves would not be within the tie).
  const double limit = shortest * (1 + kAutoTie);
  for (int m = 0; m < methods; ++m) {
    if (uniform_ms[m] > limit) continue;
    std::vector<int> capped = choice;
    for (int& c : capped) c = std::min(c, m);
    if (capped != choice)
      choice = StepMs(k, capped, cluster) <= limit ? capped : std::vector<int>(k.keys(), m);
    break;
  }
  for (size_t i = 0; i < k.keys(); ++i)
    if (!k.Compressed(i)) choice[i] = 0;  // none under every method: say so
  out.step_ms = StepMs(k, choice, cluster);
  out.method = std::move(choice);
  return out;
}

}  // namespace

Cluster AutoCluster(const Config& c) {
  Cluster k;
  k.workers = c.cluster.workers;
  k.shards = std::max<int>(1, static_cast<int>(c.cluster.servers.size()));
  k.rate_gbps = c.compress.link_gbps;
  k.latency_ms = c.compress.link_latency_ms;
  k.overlap = c.sync.overlap;
  k.star = c.compress.topology == "star";
  return k;
}

std::vector<int> ChooseMethods(const KeyCalibration& k, const Cluster& cluster) {
  return Choose(k, cluster).method;
}

AutoChoice ChooseKeyCodecs(const Config& config, const Cluster& cluster, int steps,
                           KeyCalibration* calibration) {
  GP_ENFORCE(config.push.codec != "none",
             "compress.auto chooses between none, fp16 and the push codec: push.codec is none "
             "(set the compressing one, e.g. push=topk ratio=0.01)");
  AutoChoice a;
  CodecSpec fp16;
  fp16.codec = "fp16";
  a.candidates = {{"none", CodecSpec{}, config.pull},
                  {"fp16", fp16, config.pull},
                  {config.push.ToShorthand(), config.push, config.pull}};
  *calibration = CalibrateKeys(config, a.candidates, steps);
  Chosen c = Choose(*calibration, cluster);
  a.method = std::move(c.method);
  for (int m : a.method) a.push.push_back(a.candidates[m].push);
  a.step_ms = c.step_ms;
  a.uniform_ms = std::move(c.uniform_ms);
  return a;
}

std::vector<std::string> AutoChoice::Describe(const KeyCalibration& k) const {
  std::vector<std::string> out;
  char line[512];
  for (size_t i = 0; i < method.size() && i < k.keys(); ++i) {
    const KeyCost& c = k.cost[method[i]][i];
    const bool fixed = !k.Compressed(i);
    std::snprintf(
        line, sizeof line,
        "compress.auto: %s: %s (%.3f MB as float32, %lld bytes up, ready at %.1f ms)",
        k.names[i].c_str(),
        fixed ? "none (under compress.min_numel or skip_1d)" : candidates[method[i]].label.c_str(),
        c.dense_bytes / 1e6, static_cast<long long>(c.bytes_up), k.ready_ms[i]);
    out.push_back(line);
  }
  std::snprintf(line, sizeof line, "compress.auto: predicted step %.1f ms; every key", step_ms);
  std::string summary = line;
  for (size_t m = 0; m < candidates.size() && m < uniform_ms.size(); ++m) {
    std::snprintf(line, sizeof line, "%s %s %.1f ms", m ? "," : "", candidates[m].label.c_str(),
                  uniform_ms[m]);
    summary += line;
  }
  out.push_back(summary);
  return out;
}

}  // namespace gradpress::worker
