// gradpress-bench placement: how evenly a model's bytes spread over S server shards, by
// gradpress's largest-first bin packing and by a BytePS-style hash of the same partitions
// (transport/placement.h). Pure arithmetic over the models' real parameter shapes.
//
//   gradpress-bench placement                         # table
//   gradpress-bench placement --json --shards 2,4,8   # {"model":..,"shards":..,"rule":..}
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/error.h"
#include "common/json_line.h"
#include "transport/placement.h"
#include "worker/models/model_factory.h"

namespace gradpress::bench {
namespace {

struct PlacementOptions {
  std::vector<std::string> models{"lenet", "vgg11", "resnet18", "resnet20"};
  std::vector<int> shards{2, 4, 8};
  double partition_mb = 4;
  bool json = false;
};

std::vector<transport::NamedSize> Tensors(const std::string& model) {
  // CIFAR-shaped input (LeNet: its Fashion-MNIST shape); the shapes do not depend on the seed.
  const bool lenet = model == "lenet";
  auto net = worker::models::MakeModel(model, lenet ? 1 : 3, lenet ? 28 : 32, 10);
  std::vector<transport::NamedSize> out;
  for (const auto& p : net->named_parameters())
    out.push_back({p.key(), p.value().numel(), p.value().dim() > 1 ? p.value().size(0) : 0});
  return out;
}

void RunPlacement(const PlacementOptions& o) {
  for (int s : o.shards) GP_ENFORCE(s >= 1 && s <= 1024, "--shards: ", s, " is not in [1, 1024]");
  GP_ENFORCE(o.partition_mb > 0, "--partition-mb must be > 0, got ", o.partition_mb);
  if (!o.json)
    std::printf("%-9s %6s %5s %12s %12s %9s %9s\n", "model", "MiB", "S", "parts", "max MiB", "lpt",
                "hash");
  for (const std::string& model : o.models) {
    const auto tensors = Tensors(model);
    for (int s : o.shards) {
      const transport::Placement lpt = transport::PlaceLargestFirst(tensors, s, o.partition_mb);
      const transport::Placement hash = transport::PlaceByHash(tensors, s, o.partition_mb);
      double total = 0, largest = 0;
      for (int64_t b : lpt.shard_bytes) {
        total += b;
        largest = std::max<double>(largest, b);
      }
      const double mib = 1 << 20;
      if (o.json) {
        for (const auto* p : {&lpt, &hash}) {
          double big = 0;
          for (int64_t b : p->shard_bytes) big = std::max<double>(big, b);
          std::printf("%s\n", JsonLine()
                                  .Str("model", model)
                                  .Int("shards", s)
                                  .Str("rule", p == &lpt ? "largest_first" : "hash")
                                  .Num("partition_mb", o.partition_mb)
                                  .Int("parts", static_cast<int64_t>(p->parts.size()))
                                  .Num("model_mb", total / mib)
                                  .Num("max_shard_mb", big / mib)
                                  .Num("imbalance", p->Imbalance())
                                  .Done()
                                  .c_str());
        }
      } else {
        std::printf("%-9s %6.1f %5d %12zu %12.2f %9.3f %9.3f\n", model.c_str(), total / mib, s,
                    lpt.parts.size(), largest / mib, lpt.Imbalance(), hash.Imbalance());
      }
    }
  }
}

}  // namespace

void AddPlacementCommand(CLI::App& app) {
  auto opt = std::make_shared<PlacementOptions>();
  CLI::App* cmd = app.add_subcommand(
      "placement",
      "imbalance (largest shard's bytes / mean) of placing each model's partitions on S server "
      "shards: largest-first bin packing vs a BytePS-style hash");
  cmd->add_option("--models", opt->models, "models (lenet vgg11 resnet18 resnet20)")
      ->delimiter(',');
  cmd->add_option("--shards", opt->shards, "shard counts, e.g. 2,4,8")->delimiter(',');
  cmd->add_option("--partition-mb", opt->partition_mb,
                  "cut tensors over this many MiB (cluster.partition_mb)");
  cmd->add_flag("--json", opt->json, "one JSON object per model, S and rule");
  cmd->callback([opt] { RunPlacement(*opt); });
}

}  // namespace gradpress::bench
