// gradpress-plan: which method's step is fastest for a model on a cluster (docs/planner.md).
//
//   gradpress-plan --config configs/resnet20_cifar_m5.yaml --workers 64 --shards 4
//       --rate-gbps 10 --latency-ms 0.05 --rates 0.1,1,10,100 --plot plan.png
//
// Calibrates each method (--methods, codec shorthands applied to push and pull; default
// none, fp16 and method 5's top-k 1% + QSGD 16 with error feedback) on this machine with the
// config's model, batch and bucket size (plan/calibration.h), or reads calibrations saved by
// --save (--calibration FILE ...), then predicts each method's step for the cluster
// (worker/engine/step_model.h) and prints step ms, bytes per worker per step and the share of the
// step that is exposed communication, the same at every rate of --rates with the rate where each
// method's step crosses the first method's, and a suggestion. With --accuracy RUN... (finished
// runs, one per method) and --target-acc A: each method's predicted time to A (the steps its
// run needed, plan/accuracy.h, x its predicted step). --json: one object per method
// and rate. --auto: instead, what compress.auto would choose for this cluster (per key, among
// none, fp16 and the config's push codec; worker/engine/auto_codecs.h), calibrated here. Exit 2 on
// bad input (the reason named), 1 on other failures.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/json_line.h"
#include "plan/accuracy.h"
#include "plan/calibration.h"
#include "plan/report.h"
#include "worker/engine/auto_codecs.h"

int main(int argc, char** argv) {
  namespace plan = gradpress::plan;
  CLI::App app{"gradpress-plan: predicted step time per method for a model on a cluster"};
  std::string config_path, save_dir, plot;
  std::vector<std::string> overrides, calibration_files;
  std::string methods = "none;fp16;topk ratio=0.01 error_feedback=true then=qsgd levels=16";
  std::vector<double> rates;
  int steps = 5;
  bool json = false;
  plan::Cluster cluster;
  app.add_option("--config", config_path, "the job YAML (model, dataset, batch, bucket_mb)");
  app.add_option("--set", overrides, "override a config key, e.g. --set train.batch_size=32");
  app.add_option("--methods", methods, "';'-separated codec shorthands, push and pull alike");
  app.add_option("--calibration", calibration_files, "calibrations saved by --save (no --config)");
  app.add_option("--save", save_dir, "write each method's calibration into this directory");
  app.add_option("--steps", steps, "calibration steps per method (after one warm-up)");
  app.add_option("--workers", cluster.workers, "workers in the cluster");
  app.add_option("--shards", cluster.shards, "server shards");
  app.add_option("--rate-gbps", cluster.rate_gbps, "every host's link, Gbit/s each way");
  app.add_option("--latency-ms", cluster.latency_ms, "one-way latency, ms");
  app.add_option("--compute-scale", cluster.compute_scale,
                 "worker-side times (compute, encode, decode) x this: e.g. workers / cores "
                 "when the workers share a machine's cores");
  std::string topology = "star";
  app.add_option("--topology", topology,
                 "star: each shard's link carries its workers' traffic; links: a link per "
                 "worker into the server (scripts/netem.sh's two topologies)")
      ->check(CLI::IsMember({"star", "links"}));
  app.add_flag(
      "--serial", [&](int64_t) { cluster.overlap = false; },
      "the serial step (sync.overlap false): buckets wait for backward's end");
  app.add_option("--rates", rates, "link rates to sweep, Gbit/s (e.g. 0.1,1,10,100)")
      ->delimiter(',');
  std::vector<std::string> accuracy_runs;
  double target_acc = 0;
  app.add_option("--accuracy", accuracy_runs,
                 "finished run directories, one per method in --methods order: time to "
                 "--target-acc = the steps each run needed x the predicted step");
  app.add_option("--target-acc", target_acc, "the test accuracy to reach (0..1)");
  app.add_option("--plot", plot, "PNG of step ms against link rate, a line per method (gnuplot)");
  app.add_flag("--json", json, "one JSON object per method and rate on stdout, nothing else");
  bool auto_choice = false;
  app.add_flag("--auto", auto_choice,
               "print compress.auto's per-key push codec for this cluster (needs --config)");
  CLI11_PARSE(app, argc, argv);
  cluster.star = topology == "star";
  try {
    if (auto_choice) {
      GP_ENFORCE(!config_path.empty(), "--auto calibrates the job: give --config");
      const gradpress::Config c = gradpress::LoadConfig(config_path, overrides);
      gradpress::worker::KeyCalibration k;
      const auto a = gradpress::worker::ChooseKeyCodecs(c, cluster, steps, &k);
      for (const std::string& line : a.Describe(k)) std::cout << line << "\n";
      return 0;
    }
    std::vector<plan::Calibration> cals;
    if (!calibration_files.empty()) {
      for (const std::string& f : calibration_files) {
        std::ifstream in(f);
        GP_ENFORCE(in.good(), "--calibration: cannot read '", f, "'");
        std::stringstream text;
        text << in.rdbuf();
        cals.push_back(plan::CalibrationFromYaml(text.str()));
      }
    } else {
      GP_ENFORCE(!config_path.empty(), "give --config (to calibrate) or --calibration FILE...");
      const gradpress::Config c = gradpress::LoadConfig(config_path, overrides);
      std::vector<std::string> list;
      std::stringstream in(methods);
      for (std::string m; std::getline(in, m, ';');)
        if (m.find_first_not_of(' ') != std::string::npos) list.push_back(m);
      cals = plan::Calibrate(c, list, steps);
      for (size_t i = 0; i < cals.size() && !save_dir.empty(); ++i) {
        const std::string f = save_dir + "/calibration-" + std::to_string(i + 1) + ".yaml";
        std::ofstream out(f);
        out << plan::CalibrationYaml(cals[i]) << "\n";
        GP_ENFORCE(out.good(), "--save: cannot write '", f, "'");
      }
    }
    GP_ENFORCE(!cals.empty(), "no method to plan for");
    if (rates.empty()) rates = {cluster.rate_gbps};
    plan::AccuracyTarget acc;
    GP_ENFORCE(accuracy_runs.empty() == (target_acc <= 0),
               "--accuracy and --target-acc go together (a target in (0, 1])");
    acc.target_acc = target_acc;
    for (const std::string& run : accuracy_runs)
      acc.steps.push_back(plan::StepsToAccuracy(plan::ReadAccuracy(run), target_acc));
    std::cout << plan::Report(cals, cluster, rates, json, acc);
    if (!plot.empty()) plan::Plot(cals, cluster, rates, plot);
  } catch (const gradpress::InvalidArgument& e) {
    std::cerr << "gradpress-plan: " << e.message() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gradpress-plan: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
