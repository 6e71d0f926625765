// A user's TorchScript model in the C++ daemons (worker/models/torchscript.h): loaded from a
// file Python's torch.jit.script wrote, trained by the sim (the worker's code path) with
// method 5, and refused with a clear message when frozen, mis-shaped or not a module. The
// modules are written by Debian's /usr/bin/python3 with python3-torch (scripts/setup.sh
// installs it); without it the cases that need a file say so and check nothing else.
#include "worker/models/torchscript.h"

#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "sim/simulator.h"

namespace gradpress::testing {
namespace {

const char* const kExport = R"(
import sys, torch
class Cnn(torch.nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 5)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 12 * 12, classes)
    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))
out = sys.argv[1]
torch.manual_seed(0)
torch.jit.script(Cnn(10)).save(out + "/cnn.pt")
torch.jit.script(Cnn(7)).save(out + "/seven.pt")
torch.jit.freeze(torch.jit.script(Cnn(10).eval())).save(out + "/frozen.pt")
open(out + "/junk.pt", "w").write("not a module")
)";

// The exported modules, once per test process ("" without python3-torch).
const std::string& Exports() {
  static const std::string dir = [] {
    std::string d =
        (std::filesystem::temp_directory_path() / ("gp-torchscript-" + std::to_string(getpid())))
            .string();
    std::filesystem::create_directories(d);
    std::ofstream(d + "/export.py") << kExport;
    const std::string cmd = "/usr/bin/python3 " + d + "/export.py " + d + " >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0 ? d : std::string();
  }();
  return dir;
}

std::string LoadError(const std::string& file, int64_t classes = 10) {
  try {
    worker::models::LoadTorchScript(Exports() + "/" + file, 1, 28, classes);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("a TorchScript module trains as a model: keys, gradients, shared weights",
          "[torchscript]") {
  if (Exports().empty()) {
    WARN("no python3-torch: TorchScript files cannot be made here");
    return;
  }
  auto net = worker::models::LoadTorchScript(Exports() + "/cnn.pt", 1, 28, 10);
  std::vector<std::string> keys;
  for (const auto& p : net->named_parameters()) keys.push_back(p.key());
  CHECK(keys == std::vector<std::string>{"conv_weight", "conv_bias", "bn_weight", "bn_bias",
                                         "fc_weight", "fc_bias"});
  CHECK(net->named_buffers().size() == 3);  // BatchNorm's statistics
  torch::Tensor x = torch::randn({8, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {8});
  torch::Tensor before = net->forward(x).detach();
  torch::nn::functional::cross_entropy(net->forward(x), y).backward();
  for (const auto& p : net->parameters()) CHECK(p.grad().defined());
  torch::optim::SGD sgd(net->parameters(), 0.1);
  sgd.step();  // the module's own tensors: its next forward sees the step
  CHECK_FALSE(torch::allclose(net->forward(x).detach(), before));
}

TEST_CASE("frozen, mis-shaped and non-TorchScript files are refused with how to export",
          "[torchscript]") {
  if (Exports().empty()) {
    WARN("no python3-torch: TorchScript files cannot be made here");
    return;
  }
  const std::string frozen = LoadError("frozen.pt");
  CHECK(frozen.find("no trainable parameters") != std::string::npos);
  CHECK(frozen.find("torch.jit.script(model).save(path)") != std::string::npos);
  const std::string seven = LoadError("seven.pt");
  CHECK(seven.find("[2, 7]") != std::string::npos);
  CHECK(seven.find("logits [N, 10]") != std::string::npos);
  CHECK(LoadError("junk.pt").find("not a TorchScript module") != std::string::npos);
  CHECK(LoadError("missing.pt").find("not a TorchScript module") != std::string::npos);
}

TEST_CASE("model: {name: torchscript, path} loads; the path and the name go together",
          "[torchscript]") {
  const Config c = ParseConfig("model: {name: torchscript, path: /m.pt}");
  CHECK(c.model == "torchscript");
  CHECK(c.model_path == "/m.pt");
  CHECK(ParseConfig(ToYaml(c)) == c);
  CHECK_THROWS_WITH(ParseConfig("model: torchscript"), Catch::Contains("needs model.path"));
  CHECK_THROWS_WITH(ParseConfig("model: {name: lenet, path: /m.pt}"),
                    Catch::Contains("model is 'lenet'"));
  CHECK_THROWS_WITH(ParseConfig("model: {name: torchscript, file: /m.pt}"),
                    Catch::Contains("model takes name and path"));
}

TEST_CASE("the sim trains a TorchScript model with method 5; the workers stay equal",
          "[torchscript]") {
  if (Exports().empty()) {
    WARN("no python3-torch: TorchScript files cannot be made here");
    return;
  }
  Config c = ParseConfig(R"(
name: torchscript-m5
dataset: {name: synthetic, subset: 256, test_subset: 64}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, seed: 3, log_every: 0}
cluster: {workers: 2}
push: {codec: topk, ratio: 0.1, error_feedback: true, then: {codec: qsgd, levels: 16}}
pull: {codec: topk, ratio: 0.1, error_feedback: true, then: {codec: qsgd, levels: 16}}
server: {deadline_s: 30, worker_timeout_s: 30, stats_every: 0}
)",
                         "<config>", {"model={name: torchscript, path: " + Exports() + "/cnn.pt}"});
  sim::SimOptions o;
  o.config = c;
  o.workers = 2;
  sim::Simulator s(o);
  const worker::TrainSummary summary = s.Run();
  CHECK(summary.steps == 8);
  CHECK(summary.bytes_up_per_step > 0);
  CHECK(summary.ratio_up > 5);  // compressed: top-k 10% + 4-bit values
  const auto a = s.Parameters(0), b = s.Parameters(1);
  REQUIRE(a.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
}

}  // namespace
}  // namespace gradpress::testing
