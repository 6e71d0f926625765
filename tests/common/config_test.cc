#include "common/config.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace gradpress {
namespace {

// The example of shared/DESIGN.md, "Configuration" (method 5).
const char* const kDesignExample = R"(name: lenet-fmnist-method5
model: lenet                 # lenet | vgg11 | resnet18 | resnet20
dataset: {name: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
device: auto                 # auto | cpu | cuda
train: {epochs: 2, batch_size: 64, lr: 0.01, momentum: 0.9, seed: 42}
cluster: {server: 127.0.0.1:50051, workers: 2}
sync: {mode: sync, exchange: gradients, every: 1}
push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
pull: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
output: {dir: runs}
)";

// A file under the temp directory, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/gp_config_test_XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("an empty config has the documented defaults", "[config]") {
  const Config c = ParseConfig("");
  CHECK(c.name == "experiment");
  CHECK(c.model == "lenet");
  CHECK(c.dataset.name == "fashion-mnist");
  CHECK(c.dataset.path == "/usr/share/datasets/fashion-mnist");
  CHECK(c.dataset.subset == 0);
  CHECK(c.device == "auto");
  CHECK(c.train.epochs == 2);
  CHECK(c.train.batch_size == 64);
  CHECK(c.train.lr == 0.01);
  CHECK(c.train.momentum == 0.9);
  CHECK_FALSE(c.train.nesterov);
  CHECK(c.train.lr_schedule == "none");
  CHECK(c.train.lr_gamma == 0.1);
  CHECK(c.train.log_every == 50);
  CHECK(c.cluster.server == "127.0.0.1:50051");
  CHECK(c.cluster.workers == 2);
  CHECK(c.sync.mode == "sync");
  CHECK(c.sync.exchange == "gradients");
  CHECK(c.sync.every == 1);
  CHECK(c.sync.max_staleness == 4);
  CHECK(c.sync.model_selection == "best");
  CHECK(c.push.codec == "none");
  CHECK(c.push.params.empty());
  CHECK_FALSE(c.push.then);
  CHECK(c.pull.codec == "none");
  CHECK(c.compress.min_numel == 1024);
  CHECK(c.server.listen == "0.0.0.0:50051");
  CHECK(c.server.worker_timeout_s == 30);
  CHECK(c.server.deadline_s == 120);
  CHECK(c.output.dir == "runs");
  CHECK(c == Config());
}

TEST_CASE("the DESIGN.md example loads from a file, codec chain included", "[config]") {
  TempFile file(kDesignExample);
  const Config c = LoadConfig(file.path());
  CHECK(c.name == "lenet-fmnist-method5");
  CHECK(c.train.lr == 0.01);
  CHECK(c.cluster.workers == 2);
  for (const CodecSpec* spec : {&c.push, &c.pull}) {
    CHECK(spec->codec == "topk");
    CHECK(spec->params == std::map<std::string, std::string>{{"ratio", "0.01"}});
    CHECK(spec->error_feedback);
    CHECK(spec->line > 0);
    REQUIRE(spec->then);
    CHECK(spec->then->codec == "qsgd");
    CHECK(spec->then->params.at("levels") == "16");
    CHECK_FALSE(spec->then->error_feedback);
    CHECK_FALSE(spec->then->then);
  }
  CHECK(c.push.line == 8);
}

TEST_CASE("configs/lenet_fmnist_m1..m6 load and describe the survey's six methods", "[config]") {
  auto load = [](int m) {
    return LoadConfig(std::string(GP_SOURCE_DIR) + "/configs/lenet_fmnist_m" + std::to_string(m) +
                      ".yaml");
  };
  const Config m5 = load(5);
  Config design = ParseConfig(kDesignExample);
  design.name = m5.name;  // the file is the design's example, trained for 10 epochs
  design.train.epochs = m5.train.epochs;
  design.train.lr_schedule = m5.train.lr_schedule;
  design.compress.min_numel = 100;  // LeNet's small weight tensors travel compressed too
  CHECK(m5 == design);
  CHECK(m5.push.then->codec == "qsgd");
  CHECK(load(1).sync.exchange == "weights");
  CHECK(load(1).push.codec == "none");
  CHECK(load(2).sync.exchange == "weights");
  CHECK(load(2).push.codec == "qsgd");
  CHECK(load(2).pull.codec == "none");
  CHECK(load(3).sync.exchange == "gradients");
  CHECK(load(3).pull.codec == "none");
  CHECK(load(4).pull.codec == "qsgd");
  CHECK(load(6).sync.every == 20);
  CHECK(load(6).push == m5.push);
}

TEST_CASE("every config in configs/ loads, one per model and method", "[config]") {
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(GP_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    const Config c = LoadConfig(entry.path().string());
    CHECK(!c.name.empty());
    ++files;
  }
  for (const char* model : {"lenet_fmnist", "vgg11_cifar10", "resnet18_cifar10"}) {
    for (int m = 1; m <= 6; ++m) {
      const std::string path =
          std::string(GP_SOURCE_DIR) + "/configs/" + model + "_m" + std::to_string(m) + ".yaml";
      INFO(path);
      const Config c = LoadConfig(path);
      const Config lenet = LoadConfig(std::string(GP_SOURCE_DIR) + "/configs/lenet_fmnist_m" +
                                      std::to_string(m) + ".yaml");
      CHECK(c.sync.exchange == lenet.sync.exchange);  // the same method on every model
      CHECK(c.sync.every == lenet.sync.every);
      CHECK(c.push == lenet.push);
      CHECK(c.pull == lenet.pull);
    }
  }
  CHECK(files >= 18);
}

TEST_CASE("overrides apply in order on top of the file, codec keys included", "[config]") {
  const Config c = ParseConfig(kDesignExample, "x.yaml",
                               {"train.lr=0.05", "train.lr=0.1", "sync.mode=async",
                                "sync.exchange=weights", "push.ratio=0.001", "push.then.levels=8",
                                "pull.codec=qsgd", "pull.then=null", "pull.error_feedback=false",
                                "name='my run'", "train.nesterov=yes", "dataset.subset = 1000"});
  CHECK(c.train.lr == 0.1);
  CHECK(c.sync.mode == "async");
  CHECK(c.push.params.at("ratio") == "0.001");
  CHECK(c.push.then->params.at("levels") == "8");
  CHECK(c.pull.codec == "qsgd");
  CHECK(c.pull.params.at("ratio") == "0.01");  // siblings stay, as in Hydra
  CHECK_FALSE(c.pull.then);
  CHECK_FALSE(c.pull.error_feedback);
  CHECK(c.name == "my run");
  CHECK(c.train.nesterov);
  CHECK(c.dataset.subset == 1000);

  const Config d = ParseConfig("", "x", {"push={codec: qsgd, levels: 4}", "pull=fp16"});
  CHECK(d.push.codec == "qsgd");
  CHECK(d.push.params.at("levels") == "4");
  CHECK(d.pull.codec == "fp16");
  const Config e = ParseConfig("", "x",
                               {"push.codec=topk", "push.then.levels=2", "push.then.codec=qsgd",
                                "push.then.error_feedback=on"});
  REQUIRE(e.push.then);
  CHECK(e.push.then->codec == "qsgd");
  CHECK(e.push.then->error_feedback);
  CHECK_THROWS_WITH(ParseConfig("", "x", {"push.then.levels=2"}),
                    Catch::Contains("push.then: missing 'codec'"));
}

TEST_CASE("an unknown key names file, line and the nearest valid key", "[config]") {
  const std::string text = "name: x\ntrain:\n  epochs: 3\n  learning_rate: 0.1\n";
  CHECK(ErrorOf([&] { ParseConfig(text, "config.yaml"); }) ==
        "config.yaml:4: unknown key 'train.learning_rate'; did you mean 'train.lr'?");
  CHECK_THROWS_WITH(ParseConfig("modle: lenet\n", "c.yaml"),
                    Catch::Contains("c.yaml:1: unknown key 'modle'; did you mean 'model'?"));
  CHECK_THROWS_WITH(ParseConfig("train: {batchsize: 3}\n", "c.yaml"),
                    Catch::Contains("did you mean 'train.batch_size'?"));
  CHECK_THROWS_WITH(ParseConfig("train: {workers: 3}\n", "c.yaml"),
                    Catch::Contains("did you mean 'cluster.workers'?"));
  CHECK_THROWS_WITH(ParseConfig("sync: {zzzzzzzzz: 1}\n", "c.yaml"),
                    Catch::Contains("valid keys in 'sync': mode, exchange, every"));
  CHECK(ErrorOf([] { ParseConfig("", "c", {"trian.lr=0.1"}); }) ==
        "--set trian.lr=0.1: unknown key 'trian.lr'; did you mean 'train.lr'?");
  CHECK_THROWS_WITH(ParseConfig("train: {lr: 1, lr: 2}\n", "c.yaml"),
                    Catch::Contains("c.yaml:1: duplicate key 'train.lr'"));
}

TEST_CASE("wrong types and values are errors with file and line", "[config]") {
  CHECK(ErrorOf([] { ParseConfig("train:\n  epochs: abc\n", "c.yaml"); }) ==
        "c.yaml:2: train.epochs: expected an integer >= 1, got 'abc'");
  CHECK_THROWS_WITH(ParseConfig("train: {lr: fast}", "c.yaml"),
                    Catch::Contains("c.yaml:1: train.lr: expected a number >= 0, got 'fast'"));
  CHECK_THROWS_WITH(ParseConfig("train: {lr: .nan}", "c.yaml"),
                    Catch::Contains("expected a number"));
  CHECK_THROWS_WITH(ParseConfig("train: {nesterov: maybe}", "c.yaml"),
                    Catch::Contains("expected true or false, got 'maybe'"));
  CHECK_THROWS_WITH(ParseConfig("train: {momentum: 1.5}", "c.yaml"),
                    Catch::Contains("expected a number in [0, 1], got '1.5'"));
  CHECK_THROWS_WITH(ParseConfig("train: {lr: [1, 2]}", "c.yaml"),
                    Catch::Contains("train.lr: expected a value, got a list"));
  CHECK_THROWS_WITH(ParseConfig("train: 3", "c.yaml"),
                    Catch::Contains("c.yaml:1: train: expected a mapping"));
  CHECK_THROWS_WITH(ParseConfig("push: {ratio: 0.1}", "c.yaml"),
                    Catch::Contains("c.yaml:1: push: missing 'codec'"));
  CHECK_THROWS_WITH(ParseConfig("push: [topk]", "c.yaml"),
                    Catch::Contains("push: expected a codec block"));
  CHECK_THROWS_WITH(ParseConfig("cluster: {server: localhost}", "c.yaml"),
                    Catch::Contains("expected host:port"));
  CHECK_THROWS_WITH(ParseConfig("name: a/b", "c.yaml"), Catch::Contains("without '/'"));
  CHECK_THROWS_WITH(ParseConfig("train: {lr_schedule: step}", "c.yaml"),
                    Catch::Contains("lr_step_epochs >= 1"));
  CHECK_THROWS_WITH(ParseConfig("- a\n- b\n", "c.yaml"), Catch::Contains("expected a mapping"));
}

TEST_CASE("a value outside its choices lists the allowed ones", "[config]") {
  CHECK(ErrorOf([] { ParseConfig("model: alexnet\n", "c.yaml"); }) ==
        "c.yaml:1: model: 'alexnet' is not one of lenet, vgg11, resnet18, resnet20, resnet8, "
        "torchscript");
  CHECK(ErrorOf([] { ParseConfig("", "c", {"sync.mode=lazy"}); }) ==
        "--set sync.mode=lazy: 'lazy' is not one of sync, async");
  CHECK_THROWS_WITH(ParseConfig("device: tpu"), Catch::Contains("auto, cpu, cuda"));
}

TEST_CASE("malformed overrides, YAML syntax errors and missing files are errors", "[config]") {
  CHECK(ErrorOf([] { ParseConfig("", "c", {"train.lr"}); }) ==
        "--set train.lr: expected key=value (e.g. train.lr=0.05)");
  CHECK_THROWS_WITH(ParseConfig("", "c", {"=3"}), Catch::Contains("expected key=value"));
  CHECK(ErrorOf([] { ParseConfig("", "c", {"train.lr=abc"}); }) ==
        "--set train.lr=abc: expected a number >= 0, got 'abc'");
  CHECK_THROWS_WITH(ParseConfig("", "c", {"train=3"}), Catch::Contains("'train' is a section"));
  CHECK_THROWS_WITH(ParseConfig("", "c", {"push={codec: [}"}),
                    Catch::Contains("YAML syntax error"));
  CHECK_THROWS_WITH(ParseConfig("train: {lr: 0.1\nsync: {}\n", "bad.yaml"),
                    Catch::StartsWith("bad.yaml:") && Catch::Contains("YAML syntax error"));
  CHECK_THROWS_WITH(LoadConfig("/nonexistent/gp.yaml"),
                    Catch::Contains("cannot read config file '/nonexistent/gp.yaml'"));
  CHECK_THROWS_AS(LoadConfig("/tmp"), InvalidArgument);
}

TEST_CASE("ToYaml is the resolved config and loads back to the same", "[config]") {
  const Config c =
      ParseConfig(kDesignExample, "x",
                  {"train.lr=0.05", "train.warmup_epochs=0.3", "name=null",
                   "dataset.path=", "push.then.bits=true", "server.listen=[::1]:0",
                   "train.momentum=0.30000000000000004", "server.worker_timeout_s=1234567.25"});
  const std::string yaml = ToYaml(c);
  CHECK(yaml.find("lr: 0.05\n") != std::string::npos);
  CHECK(yaml.find("deadline_s: 120\n") != std::string::npos);
  CHECK(yaml.find("then: {codec: qsgd, bits: true, levels: 16}, error_feedback: true}") !=
        std::string::npos);
  const Config back = ParseConfig(yaml, "resolved");
  CHECK(back == c);
  CHECK(ToYaml(back) == yaml);
  CHECK(back.name == "null");
  CHECK(back.dataset.path.empty());
  CHECK(back.train.warmup_epochs == 0.3);
  CHECK(ParseConfig(ToYaml(Config())) == Config());

  char dir[] = "/tmp/gp_config_out_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/run/config.yaml";
  WriteResolvedConfig(c, path);
  CHECK(LoadConfig(path) == c);
  std::remove(path.c_str());
  rmdir((std::string(dir) + "/run").c_str());
  rmdir(dir);
  CHECK_THROWS_AS(WriteResolvedConfig(c, "/proc/gp_no/config.yaml"), InvalidArgument);
}

TEST_CASE("the training rules across keys are load-time errors naming the keys", "[config]") {
  auto error = [](const std::string& yaml) { return ErrorOf([&] { ParseConfig(yaml); }); };
  CHECK(error("sync: {every: 20, exchange: weights}")
            .find("sync.every 20 (method 6) needs "
                  "sync.exchange: gradients") != std::string::npos);
  CHECK(error("compress: {momentum_correction: 0.9}\npush: {codec: topk, error_feedback: true}")
            .find("push.error_feedback: false") != std::string::npos);
  CHECK(error("compress: {warmup_epochs: 2}\npush: {codec: qsgd}").find("push.ratio") !=
        std::string::npos);
  CHECK(error("compress: {momentum_correction: 0.9, dynamic: {ladder: 'qsgd|fp16'}}\n"
              "push: {codec: topk, ratio: 0.01}")
            .find("compress.dynamic.ladder") != std::string::npos);
  CHECK_NOTHROW(ParseConfig("sync: {mode: async, exchange: weights}"));
}

TEST_CASE("ConfigHash tells jobs apart", "[config]") {
  const Config a = ParseConfig(kDesignExample), b = ParseConfig(kDesignExample, "other.yaml");
  CHECK(ConfigHash(a) == ConfigHash(b));
  CHECK(ConfigHash(a).size() == 16);
  CHECK(ConfigHash(a) != ConfigHash(ParseConfig(kDesignExample, "x", {"push.ratio=0.02"})));
  CHECK(ConfigHash(a) != ConfigHash(ParseConfig(kDesignExample, "x", {"train.lr=0.02"})));
  CHECK(a != ParseConfig(kDesignExample, "x", {"push.then.levels=8"}));
}

TEST_CASE("security and faults blocks: defaults, values, errors", "[config][security]") {
  const Config d = ParseConfig("");
  CHECK_FALSE(d.security.tls);
  CHECK(d.security.cert.empty());
  CHECK(d.security.token_file.empty());
  CHECK_FALSE(d.security.allow_plaintext_token);
  CHECK(d.faults.drop == 0);
  CHECK(d.faults.drop_reply == 0);
  CHECK(d.faults.delay == 0);
  CHECK(d.faults.delay_ms == 20);
  CHECK(d.faults.fail == 0);
  CHECK(d.faults.seed == 1);

  const Config c = ParseConfig(
      "security: {tls: true, cert: s.pem, key: s.key, ca: ca.pem, client_ca: cca.pem,\n"
      "           client_cert: c.pem, client_key: c.key, server_name: ps.local,\n"
      "           token_file: tok, allow_plaintext_token: false}\n"
      "faults: {drop: 0.1, drop_reply: 0.05, delay: 0.2, delay_ms: 7, fail: 0.02, seed: 9}\n");
  CHECK(c.security.tls);
  CHECK(c.security.cert == "s.pem");
  CHECK(c.security.key == "s.key");
  CHECK(c.security.ca == "ca.pem");
  CHECK(c.security.client_ca == "cca.pem");
  CHECK(c.security.client_cert == "c.pem");
  CHECK(c.security.client_key == "c.key");
  CHECK(c.security.server_name == "ps.local");
  CHECK(c.security.token_file == "tok");
  CHECK(c.faults.drop == 0.1);
  CHECK(c.faults.drop_reply == 0.05);
  CHECK(c.faults.delay_ms == 7);
  CHECK(c.faults.seed == 9);
  CHECK(ParseConfig(ToYaml(c)) == c);

  CHECK(ErrorOf([] { ParseConfig("faults: {drop: 1.5}"); }).find("faults.drop") !=
        std::string::npos);
  CHECK(ErrorOf([] { ParseConfig("faults: {fial: 0.1}"); }).find("did you mean 'faults.fail'") !=
        std::string::npos);
  CHECK(ErrorOf([] { ParseConfig("security: {tls: maybe}"); }).find("security.tls") !=
        std::string::npos);
  // Certificates without TLS would protect nothing: an error, not silence.
  CHECK(ErrorOf([] {
          ParseConfig("security: {ca: ca.pem}");
        }).find("security.ca is set but security.tls is false") != std::string::npos);
  CHECK(ErrorOf([] {
          ParseConfig("security: {tls: true, cert: a.pem}");
        }).find("security.cert and security.key go together") != std::string::npos);
  CHECK(ErrorOf([] {
          ParseConfig("security: {tls: true, client_key: a.key}");
        }).find("client_cert and security.client_key") != std::string::npos);
}

TEST_CASE("ConfigHash ignores the per-process security and faults", "[config][security]") {
  const Config a = ParseConfig(kDesignExample, "x");
  const Config b = ParseConfig(kDesignExample, "x",
                               {"faults.drop=0.1", "security.tls=true", "security.ca=/x.pem"});
  CHECK(ConfigHash(a) == ConfigHash(b));
  CHECK(a != b);
}

}  // namespace

}  // namespace gradpress
