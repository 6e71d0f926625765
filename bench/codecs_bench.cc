// gradpress-bench codecs: ratio and single-thread encode/decode throughput of every codec.
//
//   gradpress-bench codecs [--numel N] [--repeats R] [--codec SPEC]... [--json]
//   gradpress-bench codecs --device cuda [--numel N] [--repeats R] [--codec SPEC]... [--json]
//
// --device cuda prints bench/cuda's table instead (cuda_bench.h: the device codecs from and to
// device memory, against same-run copy references), with torch::topk on CUDA measured here
// as its torch_topk_cuda reference when this LibTorch has CUDA; builds without CUDA (no nvcc)
// refuse it.
//
// Input: torch::randn({N}) * 0.01 with a fixed seed. Each row: one untimed warm-up
// encode + decode, then the median of R EncodeTo calls on the tensor's float32 memory and
// of R DecodeTo calls (of the last payload) into a preallocated buffer.
// encode_gbps = 4 N / median encode seconds / 1e9 (decode likewise); ratio = 4 N / bytes.
// Reference rows, same input, same R: torch_topk (torch::topk(|g|, N / 100); decode is a
// zero fill plus index_put_ of the k values) and memcpy of the 4 N bytes.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/error.h"
#include "common/timer.h"
#include "compressors/registry.h"
#ifdef GP_BENCH_CUDA
#include "bench/cuda/cuda_bench.h"
#endif

namespace gradpress::bench {

namespace {

using compressors::Compressor;

constexpr uint64_t kSeed = 20240601;
constexpr float kGradScale = 0.01f;

struct CodecsOptions {
  int64_t numel = 25'000'000;
  int repeats = 5;
  bool repeats_given = false;  // --device cuda defaults to 20 (short GPU timings vary more)
  std::vector<std::string> specs;
  bool json = false;
  std::string device = "cpu";
};

struct Row {
  std::string codec;   // Compressor::Name(), or torch_topk / memcpy
  std::string params;  // spec minus the codec name: "index_coding=int32", "" for defaults
  int64_t bytes = 0;   // payload bytes of the last encode
  double ratio = 0;
  double encode_s = 0;  // medians
  double decode_s = 0;
};

// The row's spec minus the codec name: "index_coding=int32", "" for defaults.
std::string SpecParams(const CodecSpec& config) {
  const std::string s = config.ToShorthand();
  return s.size() > config.codec.size() ? s.substr(config.codec.size() + 1) : "";
}

std::vector<CodecSpec> DefaultConfigs() {
  std::vector<CodecSpec> configs;
  for (const auto& name : compressors::RegisteredCompressorNames()) {
    CodecSpec c;
    c.codec = name;
    configs.push_back(c);
  }
  for (const char* spec :
       {"topk index_coding=int32", "qsgd elias=false", "topk then=qsgd levels=16"}) {
    configs.push_back(ParseCodecShorthand(spec));
  }
  return configs;
}

// Median seconds of fn(run) for run = 1..repeats.
template <typename Fn>
double MedianSeconds(int repeats, Fn&& fn) {
  std::vector<double> seconds;
  for (int run = 1; run <= repeats; ++run) {
    Timer timer;
    fn(run);
    seconds.push_back(timer.ElapsedSeconds());
  }
  return Median(seconds);
}

Row MeasureCodec(Compressor& codec, const std::string& params, const float* grad, int64_t n,
                 int repeats, float* decoded) {
  std::string payload;
  codec.EncodeTo(grad, n, {"bench", 0}, &payload);  // warm-up; sizes the payload buffer
  codec.DecodeTo(payload, n, decoded);
  Row row{codec.Name(), params};
  row.encode_s = MedianSeconds(repeats, [&](int run) {
    payload.clear();  // keeps the capacity: no allocation inside the timed region
    codec.EncodeTo(grad, n, {"bench", run}, &payload);
  });
  row.decode_s = MedianSeconds(repeats, [&](int) { codec.DecodeTo(payload, n, decoded); });
  row.bytes = static_cast<int64_t>(payload.size());
  row.ratio = row.bytes > 0 ? 4.0 * static_cast<double>(n) / static_cast<double>(row.bytes) : 0;
  return row;
}

Row MeasureTorchTopK(const torch::Tensor& grad, int repeats, float* decoded) {
  const int64_t n = grad.numel();
  const int64_t k = std::max<int64_t>(1, n / 100);
  torch::Tensor values, indices;
  auto encode = [&](int) { std::tie(values, indices) = torch::topk(grad.abs(), k); };
  torch::Tensor dense = torch::from_blob(decoded, {n}, torch::kFloat32);
  auto decode = [&](int) {
    dense.zero_();
    dense.index_put_({indices}, values);
  };
  encode(0);
  decode(0);
  Row row{"torch_topk", "k=" + std::to_string(k)};
  row.encode_s = MedianSeconds(repeats, encode);
  row.decode_s = MedianSeconds(repeats, decode);
  row.bytes = k * 8;  // float32 value + int32 index
  row.ratio = 4.0 * static_cast<double>(n) / static_cast<double>(row.bytes);
  return row;
}

Row MeasureMemcpy(const float* grad, int64_t n, int repeats, float* copy) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  auto run = [&](int) { std::memcpy(copy, grad, bytes); };
  run(0);
  Row row{"memcpy", ""};
  row.encode_s = MedianSeconds(repeats, run);
  row.decode_s = row.encode_s;
  row.bytes = static_cast<int64_t>(bytes);
  row.ratio = 1.0;
  GP_ENFORCE_AS(Internal, copy[n - 1] == grad[n - 1], "memcpy reference copied wrong bytes");
  return row;
}

double Gbps(int64_t n, double seconds) { return 4.0 * static_cast<double>(n) / seconds / 1e9; }

void PrintJson(const Row& r, int64_t n) {
  std::cout << "{\"codec\":" << JsonString(r.codec) << ",\"params\":" << JsonString(r.params)
            << ",\"ratio\":" << JsonNumber(r.ratio)
            << ",\"encode_gbps\":" << JsonNumber(Gbps(n, r.encode_s))
            << ",\"decode_gbps\":" << JsonNumber(Gbps(n, r.decode_s)) << ",\"bytes\":" << r.bytes
            << ",\"numel\":" << n << ",\"encode_ms\":" << JsonNumber(r.encode_s * 1e3)
            << ",\"decode_ms\":" << JsonNumber(r.decode_s * 1e3) << "}\n";
}

void PrintTable(const std::vector<Row>& rows, int64_t n) {
  int codec_w = 5, params_w = 6;
  for (const Row& r : rows) {
    codec_w = std::max(codec_w, static_cast<int>(r.codec.size()));
    params_w = std::max(params_w, static_cast<int>(r.params.size()));
  }
  std::printf("%-*s  %-*s  %9s  %11s  %11s  %11s  %10s  %10s\n", codec_w, "codec", params_w,
              "params", "ratio", "bytes", "encode GB/s", "decode GB/s", "encode ms", "decode ms");
  for (const Row& r : rows) {
    std::printf("%-*s  %-*s  %9.2f  %11lld  %11.3f  %11.3f  %10.2f  %10.2f\n", codec_w,
                r.codec.c_str(), params_w, r.params.c_str(), r.ratio,
                static_cast<long long>(r.bytes), Gbps(n, r.encode_s), Gbps(n, r.decode_s),
                r.encode_s * 1e3, r.decode_s * 1e3);
  }
}

// "topk encode = 23.4x torch_topk, ..." for the default-parameter rows that were measured.
std::string SpeedupLine(const std::vector<Row>& rows) {
  auto find = [&rows](const std::string& codec) -> const Row* {
    for (const Row& r : rows) {
      if (r.codec == codec && (r.params.empty() || codec == "torch_topk")) return &r;
    }
    return nullptr;
  };
  const Row* ref = find("torch_topk");
  std::string line;
  for (const char* codec : {"topk", "gaussiank", "dgc"}) {
    const Row* r = find(codec);
    if (!ref || !r || r->encode_s <= 0) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s encode = %.1fx torch_topk", codec,
                  ref->encode_s / r->encode_s);
    line += (line.empty() ? "" : ", ") + std::string(buf);
  }
  return line;
}

void RunCodecs(const CodecsOptions& opt) {
  GP_ENFORCE(opt.numel >= 1 && opt.numel <= std::numeric_limits<int32_t>::max(),
             "--numel must be in [1, 2^31 - 1], got ", opt.numel);
  GP_ENFORCE(opt.repeats >= 5 && opt.repeats <= 1000,
             "--repeats must be in [5, 1000] (median of at least 5 runs), got ", opt.repeats);
  compressors::RegisterBuiltinCompressors();
  std::vector<CodecSpec> configs;
  for (const auto& spec : opt.specs) configs.push_back(ParseCodecShorthand(spec));
  if (configs.empty()) configs = DefaultConfigs();
  // Build every codec before measuring anything, so a bad spec fails fast.
  std::vector<std::unique_ptr<Compressor>> codecs;
  for (const auto& config : configs) codecs.push_back(compressors::MakeCompressor(config));

  torch::set_num_threads(1);
  torch::manual_seed(kSeed);
  const int64_t n = opt.numel;
  const torch::Tensor grad = (torch::randn({n}) * kGradScale).contiguous();
  const float* g = grad.data_ptr<float>();
  std::vector<float> decoded(static_cast<size_t>(n));
  std::cerr << "gradpress-bench codecs: numel=" << n << " repeats=" << opt.repeats
            << " threads=" << torch::get_num_threads() << "\n";

  std::vector<Row> rows;
  auto done = [&rows, &opt, n](Row row) {
    std::cerr << "  " << row.codec << (row.params.empty() ? "" : " " + row.params) << ": "
              << row.encode_s * 1e3 << " ms encode, " << row.decode_s * 1e3 << " ms decode\n";
    if (opt.json) PrintJson(row, n);
    rows.push_back(std::move(row));
  };
  for (size_t i = 0; i < codecs.size(); ++i) {
    done(MeasureCodec(*codecs[i], SpecParams(configs[i]), g, n, opt.repeats, decoded.data()));
  }
  done(MeasureTorchTopK(grad, opt.repeats, decoded.data()));
  done(MeasureMemcpy(g, n, opt.repeats, decoded.data()));

  const std::string speedups = SpeedupLine(rows);
  if (opt.json) {
    if (!speedups.empty()) std::cerr << speedups << "\n";
    return;
  }
  PrintTable(rows, n);
  if (!speedups.empty()) std::printf("%s\n", speedups.c_str());
}

#ifdef GP_BENCH_CUDA
// torch::topk(|g|, N / 100) on CUDA: the median wall time of R runs after 2 warm-ups, each
// synchronised, in microseconds (the device codecs are timed the same way); -1 when this
// LibTorch has no CUDA.
double TorchTopkCudaMicros(int64_t n, int repeats) {
  if (!torch::cuda::is_available()) return -1;
  torch::manual_seed(kSeed);
  const torch::Tensor grad = (torch::randn({n}) * kGradScale).to(torch::kCUDA);
  const int64_t k = std::max<int64_t>(1, n / 100);
  auto run = [&](int) {
    auto result = torch::topk(grad.abs(), k);
    torch::cuda::synchronize();
  };
  run(0);
  run(0);
  return MedianSeconds(repeats, run) * 1e6;
}
#endif

void RunCodecsOnDevice(const CodecsOptions& opt) {
  GP_ENFORCE(opt.device == "cpu" || opt.device == "cuda", "--device must be cpu or cuda, got '",
             opt.device, "'");
#ifdef GP_BENCH_CUDA
  cuda::CudaBenchOptions cuda_opt;
  cuda_opt.numel = opt.numel;
  if (opt.repeats_given) cuda_opt.repeats = opt.repeats;
  cuda_opt.specs = opt.specs;
  cuda_opt.json = opt.json;
  cuda_opt.measure_torch_topk_us = [](int64_t n, int repeats) {
    const double us = TorchTopkCudaMicros(n, repeats);
    if (us < 0) std::cerr << "torch::topk: this LibTorch has no CUDA; no torch_topk_cuda row\n";
    return us;
  };
  const int rc = cuda::RunCudaCodecsBench(cuda_opt);
  std::cout.flush();
  // 77: no CUDA device (skipped); 1: a codec failed. CLI11's callback returns nothing.
  if (rc != 0) std::exit(rc);
#else
  throw InvalidArgument("--device cuda: this gradpress-bench was built without CUDA (no nvcc)");
#endif
}

}  // namespace

void AddCodecsCommand(CLI::App& app) {
  auto opt = std::make_shared<CodecsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "codecs",
      "Ratio and single-thread encode/decode GB/s of each codec, with torch::topk and "
      "memcpy reference rows");
  cmd->add_option("--numel", opt->numel, "float32 elements in the test gradient")
      ->capture_default_str();
  cmd->add_option("--repeats", opt->repeats, "timed runs per row; the median is reported (>= 5)")
      ->capture_default_str();
  cmd->add_option("--codec", opt->specs,
                  "codec spec, repeatable, replaces the default rows: \"qsgd levels=8\", "
                  "\"topk ratio=0.01 then=qsgd levels=16\"")
      ->allow_extra_args(false);
  cmd->add_flag("--json", opt->json, "one JSON object per row on stdout, nothing else");
  cmd->add_option("--device", opt->device,
                  "cpu: the host kernels on one thread; cuda: the device codecs from and to "
                  "device memory (bench/cuda, --repeats defaults to 20)")
      ->capture_default_str();
  cmd->callback([opt, cmd] {
    opt->repeats_given = cmd->count("--repeats") > 0;
    if (opt->device == "cpu") {
      RunCodecs(*opt);
    } else {
      RunCodecsOnDevice(*opt);
    }
  });
}

}  // namespace gradpress::bench
