// The CUDA codec bench (cuda_bench.h): measurement, the issue's targets, and the table.
//
// Input: N seeded N(0, 0.01^2) floats (std::mt19937 + normal_distribution) generated on the
// host and copied to the device once. Every figure is the median of R wall-clock timings
// after 2 untimed warm-ups, the stream synchronised inside each timing:
//   encode  DeviceCodec::Encode(d_grad -> PinnedBytes), step = the run's index
//   decode  DeviceCodec::Decode(the last payload, pinned -> d_out)
//   d2d     cudaMemcpyAsync of the 4N gradient bytes, device to device
//   d2h / h2d  pinned copies of 4N bytes, and of each codec's payload size (its own row)
// GB/s are of the dense fp32 gradient: 4N bytes / seconds / 1e9, for every row, so the
// payload-size copies read as "the fastest an encode writing that payload could be".
// Each row also checks its last device decode against the CPU decoder of the same payload.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cuda/cuda_bench.h"
#include "common/error.h"
#include "common/timer.h"
#include "compressors/cuda/device_codec.h"
#include "compressors/registry.h"

namespace gradpress::bench::cuda {

std::vector<std::string> DefaultCudaBenchSpecs() {
  // clang-format off
  return {"none", "fp16", "int8", "qsgd", "qsgd elias=false", "terngrad", "onebit", "topk",
          "topk index_coding=int32", "randomk", "threshold", "gaussiank", "dgc",
          "topk then=qsgd levels=16", "randomk then=fp16", "dgc then=qsgd"};
  // clang-format on
}

namespace {

using compressors::cuda::DeviceCodec;
using compressors::cuda::PinnedBytes;

constexpr uint32_t kSeed = 20240601;
constexpr float kGradScale = 0.01f;
constexpr int kWarmups = 2;

void Check(cudaError_t err, const char* what) {
  GP_ENFORCE_AS(Internal, err == cudaSuccess, "gradpress-cuda-bench: ", what, ": ",
                cudaGetErrorString(err));
}

// cudaMalloc'd bytes, grown on demand.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* Reserve(size_t n) {
    if (n > size_) {
      if (data_ != nullptr) Check(cudaFree(data_), "cudaFree");
      data_ = nullptr;
      Check(cudaMalloc(&data_, n), "cudaMalloc");
      size_ = n;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

std::string Format(const char* fmt, double a, double b = 0) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), fmt, a, b);
  return buf;
}

// The median seconds of fn(run) over R runs, after the warm-ups, each synchronised.
template <typename Fn>
double MedianSeconds(int repeats, cudaStream_t stream, Fn&& fn) {
  for (int w = 0; w < kWarmups; ++w) {
    fn(-1 - w);
    Check(cudaStreamSynchronize(stream), "warm-up");
  }
  std::vector<double> seconds;
  for (int run = 1; run <= repeats; ++run) {
    Timer timer;
    fn(run);
    Check(cudaStreamSynchronize(stream), "timed run");
    seconds.push_back(timer.ElapsedSeconds());
  }
  return Median(seconds);
}

// A required rate (dense fp32 GB/s) and what it is: "0.25 x d2d".
struct Bound {
  std::string name;
  double gbps;
};

// "meets", or "misses (X% of <bound>)" for each bound the rate falls short of; "-" when the
// issue sets no target for the row.
std::string Verdict(double gbps, const std::vector<Bound>& bounds) {
  if (bounds.empty()) return "-";
  std::string misses;
  for (const Bound& b : bounds) {
    if (gbps >= b.gbps) continue;
    misses += (misses.empty() ? "" : "; ") + Format("%.0f%% of ", 100 * gbps / b.gbps) + b.name +
              Format(" = %.1f GB/s", b.gbps);
  }
  return misses.empty() ? "meets" : "misses (" + misses + ")";
}

// This run's references, as dense fp32 GB/s.
struct References {
  double d2d = 0, d2h = 0, h2d = 0;  // of the 4N gradient bytes
  double torch_topk = -1;            // 4N / torch.topk's time; < 0 when not given
};

// One codec's figures; NaN where its measurement failed (check "FAILED").
struct Row {
  std::string codec, params, check = "FAILED";
  int64_t bytes = 0;
  double encode_s = NAN, decode_s = NAN, d2h_s = NAN, h2d_s = NAN;  // d2h / h2d of the payload
  std::string encode_verdict = "-", decode_verdict = "-";
};

// The spec minus its codec name: "index_coding=int32", "" for defaults.
std::string SpecParams(const CodecSpec& spec) {
  const std::string s = spec.ToShorthand();
  return s.size() > spec.codec.size() ? s.substr(spec.codec.size() + 1) : "";
}

// The issue's targets for a row, by the codec it starts with (a pipeline is judged as its
// sparsifier). encode: d2h of the payload; decode: h2d of it.
std::vector<Bound> Targets(const std::string& codec, double copy_gbps, bool encode,
                           const References& ref) {
  const std::string copy = encode ? "d2h(P)" : "h2d(P)";
  if (codec == "topk" || codec == "dgc" || codec == "gaussiank") {
    std::vector<Bound> b = {{"0.25 x d2d", 0.25 * ref.d2d}};
    if (encode && ref.torch_topk > 0) b.push_back({"5 x torch_topk_cuda", 5 * ref.torch_topk});
    return b;
  }
  if (codec == "qsgd" || codec == "terngrad" || codec == "onebit" || codec == "randomk") {
    if (0.40 * ref.d2d <= 0.60 * copy_gbps) return {{"0.40 x d2d", 0.40 * ref.d2d}};
    return {{"0.60 x " + copy, 0.60 * copy_gbps}};
  }
  if (codec == "fp16" || codec == "int8" || codec == "none") {
    return {{"0.60 x " + copy, 0.60 * copy_gbps}};
  }
  return {};  // threshold: its payload follows the data; the issue sets no rate
}

double Gbps(int64_t n, double seconds) { return 4.0 * static_cast<double>(n) / seconds / 1e9; }

class Bench {
 public:
  Bench(const CudaBenchOptions& opt, cudaStream_t stream) : opt_(opt), stream_(stream) {}

  // The input on the device, and the reference copies of the dense gradient.
  References Prepare(double torch_topk_us) {
    const int64_t n = opt_.numel;
    std::mt19937 gen(kSeed);
    std::normal_distribution<float> normal(0.f, kGradScale);
    host_.resize(static_cast<size_t>(n));
    for (float& v : host_) v = normal(gen);
    grad_ = static_cast<float*>(grad_buf_.Reserve(Bytes()));
    out_ = static_cast<float*>(out_buf_.Reserve(Bytes()));
    Check(cudaMemcpy(grad_, host_.data(), Bytes(), cudaMemcpyHostToDevice), "upload");
    References ref;
    ref.d2d = Gbps(n, MedianSeconds(opt_.repeats, stream_, [&](int) {
                     Check(cudaMemcpyAsync(out_, grad_, Bytes(), cudaMemcpyDeviceToDevice, stream_),
                           "d2d");
                   }));
    ref.d2h = Gbps(n, CopySeconds(Bytes(), true));
    ref.h2d = Gbps(n, CopySeconds(Bytes(), false));
    if (torch_topk_us > 0) ref.torch_topk = Gbps(n, torch_topk_us * 1e-6);
    return ref;
  }

  // Median seconds of a pinned copy of `bytes` from the device (d2h) or to it.
  double CopySeconds(size_t bytes, bool d2h) {
    void* dev = copy_dev_.Reserve(std::max<size_t>(bytes, 1));
    copy_host_.Resize(std::max<size_t>(bytes, 1));
    return MedianSeconds(opt_.repeats, stream_, [&](int) {
      Check(d2h ? cudaMemcpyAsync(copy_host_.data(), dev, bytes, cudaMemcpyDeviceToHost, stream_)
                : cudaMemcpyAsync(dev, copy_host_.data(), bytes, cudaMemcpyHostToDevice, stream_),
            "reference copy");
    });
  }

  // Fills *row's figures (its codec and params are set).
  void Measure(const CodecSpec& spec, DeviceCodec& codec, const References& ref, Row* row_out) {
    const int64_t n = opt_.numel;
    Row& row = *row_out;
    row.encode_s = MedianSeconds(opt_.repeats, stream_, [&](int run) {
      codec.Encode(grad_, n, {"bench", run}, &payload_, stream_);
    });
    row.bytes = static_cast<int64_t>(payload_.size());
    row.decode_s = MedianSeconds(opt_.repeats, stream_,
                                 [&](int) { codec.Decode(payload_.view(), n, out_, stream_); });
    row.check = CheckDecode(row.codec);
    row.d2h_s = CopySeconds(payload_.size(), true);
    row.h2d_s = CopySeconds(payload_.size(), false);
    row.encode_verdict =
        Verdict(Gbps(n, row.encode_s), Targets(spec.codec, Gbps(n, row.d2h_s), true, ref));
    row.decode_verdict =
        Verdict(Gbps(n, row.decode_s), Targets(spec.codec, Gbps(n, row.h2d_s), false, ref));
  }

 private:
  size_t Bytes() const { return static_cast<size_t>(opt_.numel) * sizeof(float); }

  // "ok" when the last device decode equals the CPU decoder's on the same payload.
  std::string CheckDecode(const std::string& name) {
    std::vector<float> device(host_.size()), cpu(host_.size());
    Check(cudaMemcpy(device.data(), out_, Bytes(), cudaMemcpyDeviceToHost), "download");
    compressors::MakeDecoder(name)->DecodeTo(payload_.view(), opt_.numel, cpu.data());
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (device[i] != cpu[i] && !(std::isnan(device[i]) && std::isnan(cpu[i]))) {
        return "DIFF@" + std::to_string(i);
      }
    }
    return "ok";
  }

  const CudaBenchOptions& opt_;
  cudaStream_t stream_;
  std::vector<float> host_;
  DeviceBuffer grad_buf_, out_buf_, copy_dev_;
  float* grad_ = nullptr;
  float* out_ = nullptr;
  PinnedBytes payload_, copy_host_;
};

void PrintJsonRow(const Row& r, int64_t n) {
  std::cout << "{\"codec\":" << JsonString(r.codec) << ",\"params\":" << JsonString(r.params)
            << ",\"numel\":" << n << ",\"bytes\":" << r.bytes
            << ",\"ratio\":" << JsonNumber(4.0 * n / std::max<int64_t>(r.bytes, 1))
            << ",\"encode_us\":" << JsonNumber(r.encode_s * 1e6)
            << ",\"decode_us\":" << JsonNumber(r.decode_s * 1e6)
            << ",\"encode_gbps\":" << JsonNumber(Gbps(n, r.encode_s))
            << ",\"decode_gbps\":" << JsonNumber(Gbps(n, r.decode_s))
            << ",\"d2h_payload_us\":" << JsonNumber(r.d2h_s * 1e6)
            << ",\"h2d_payload_us\":" << JsonNumber(r.h2d_s * 1e6)
            << ",\"check\":" << JsonString(r.check)
            << ",\"encode_target\":" << JsonString(r.encode_verdict)
            << ",\"decode_target\":" << JsonString(r.decode_verdict) << "}\n";
}

void PrintJsonReference(const std::string& name, const std::string& device, double gbps,
                        int64_t n) {
  std::cout << "{\"reference\":" << JsonString(name) << ",\"device\":" << JsonString(device)
            << ",\"numel\":" << n << ",\"us\":" << JsonNumber(4.0 * n / gbps / 1e3)
            << ",\"gbps\":" << JsonNumber(gbps) << "}\n";
}

void PrintTable(const std::vector<Row>& rows, const References& ref, const std::string& device,
                int64_t n) {
  int codec_w = 5, params_w = 6;
  for (const Row& r : rows) {
    codec_w = std::max(codec_w, static_cast<int>(r.codec.size()));
    params_w = std::max(params_w, static_cast<int>(r.params.size()));
  }
  std::printf(
      "%s, numel %lld; GB/s of the dense fp32 gradient (4N bytes / time); d2h(P), h2d(P): pinned "
      "copies of the payload\n",
      device.c_str(), static_cast<long long>(n));
  std::printf("%-*s  %-*s  %7s  %10s  %9s  %9s  %8s  %8s  %9s  %9s  %-7s  %s | %s\n", codec_w,
              "codec", params_w, "params", "ratio", "bytes", "enc us", "dec us", "enc GB/s",
              "dec GB/s", "d2h(P) us", "h2d(P) us", "check", "encode target", "decode target");
  for (const Row& r : rows) {
    std::printf(
        "%-*s  %-*s  %7.2f  %10lld  %9.1f  %9.1f  %8.1f  %8.1f  %9.1f  %9.1f  %-7s  %s | %s\n",
        codec_w, r.codec.c_str(), params_w, r.params.c_str(),
        4.0 * n / std::max<int64_t>(r.bytes, 1), static_cast<long long>(r.bytes), r.encode_s * 1e6,
        r.decode_s * 1e6, Gbps(n, r.encode_s), Gbps(n, r.decode_s), r.d2h_s * 1e6, r.h2d_s * 1e6,
        r.check.c_str(), r.encode_verdict.c_str(), r.decode_verdict.c_str());
  }
  std::printf("\nreferences (same run, %lld bytes):\n", static_cast<long long>(4 * n));
  const std::pair<const char*, double> refs[] = {{"d2d", ref.d2d},
                                                 {"d2h_pinned", ref.d2h},
                                                 {"h2d_pinned", ref.h2d},
                                                 {"torch_topk_cuda", ref.torch_topk}};
  for (const auto& [name, gbps] : refs) {
    if (gbps <= 0) continue;
    std::printf("  %-16s %9.1f us  %8.1f GB/s\n", name, 4.0 * n / gbps / 1e3, gbps);
  }
}

}  // namespace

int RunCudaCodecsBench(const CudaBenchOptions& opt) {
  GP_ENFORCE(opt.numel >= 1 && opt.numel <= std::numeric_limits<int32_t>::max(),
             "--numel must be in [1, 2^31 - 1], got ", opt.numel);
  GP_ENFORCE(opt.repeats >= 5 && opt.repeats <= 1000,
             "--repeats must be in [5, 1000] (median of at least 5 runs), got ", opt.repeats);
  GP_ENFORCE(opt.torch_topk_us < 0 || std::isfinite(opt.torch_topk_us),
             "--torch-topk-us must be a positive number of microseconds");
  compressors::RegisterBuiltinCompressors();
  std::vector<CodecSpec> specs;
  for (const auto& s : opt.specs.empty() ? DefaultCudaBenchSpecs() : opt.specs) {
    specs.push_back(ParseCodecShorthand(s));
    compressors::MakeCompressor(specs.back());  // names and parameters, also without a device
  }
  if (!compressors::cuda::DeviceAvailable()) {
    std::cerr << "gradpress-cuda-bench: no CUDA device: skipped\n";
    return kNoDeviceExitCode;
  }
  // Build every codec before measuring anything, so a bad spec fails fast.
  std::vector<std::unique_ptr<DeviceCodec>> codecs;
  for (const auto& spec : specs) codecs.push_back(compressors::cuda::MakeDeviceCodec(spec));

  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const std::string device = prop.name;
  double torch_topk_us = opt.torch_topk_us;
  if (opt.measure_torch_topk_us) torch_topk_us = opt.measure_torch_topk_us(opt.numel, opt.repeats);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<Row> rows;
  References ref;
  bool failed = false;
  {
    Bench bench(opt, stream);
    std::cerr << "gradpress-cuda-bench: " << device << ", numel=" << opt.numel
              << " repeats=" << opt.repeats << "\n";
    ref = bench.Prepare(torch_topk_us);
    std::cerr << "  d2d " << ref.d2d << " GB/s, d2h " << ref.d2h << ", h2d " << ref.h2d << "\n";
    for (size_t i = 0; i < codecs.size(); ++i) {
      Row& r = rows.emplace_back();
      r.codec = codecs[i]->Name();
      r.params = SpecParams(specs[i]);
      // A codec that throws (a bug: its input and payloads are valid) fails its row only,
      // unless it broke the CUDA context, which every later row would then report.
      try {
        bench.Measure(specs[i], *codecs[i], ref, &r);
      } catch (const std::exception& e) {
        failed = true;
        std::cerr << "  " << r.codec << " " << r.params << ": FAILED: " << e.what() << "\n";
      }
      std::cerr << "  " << r.codec << (r.params.empty() ? "" : " " + r.params) << ": "
                << r.encode_s * 1e6 << " us encode, " << r.decode_s * 1e6 << " us decode, "
                << r.check << "\n";
      failed |= r.check != "ok";
      if (opt.json) PrintJsonRow(r, opt.numel);
      if (cudaStreamSynchronize(stream) != cudaSuccess) {
        std::cerr << "gradpress-cuda-bench: the CUDA context is broken: "
                  << cudaGetErrorString(cudaGetLastError()) << "; stopping\n";
        return 1;
      }
    }
  }
  codecs.clear();  // their device buffers go before the stream
  Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  if (opt.json) {
    for (const auto& [name, gbps] : {std::pair<std::string, double>{"d2d", ref.d2d},
                                     {"d2h_pinned", ref.d2h},
                                     {"h2d_pinned", ref.h2d},
                                     {"torch_topk_cuda", ref.torch_topk}}) {
      if (gbps > 0) PrintJsonReference(name, device, gbps, opt.numel);
    }
  } else {
    PrintTable(rows, ref, device, opt.numel);
  }
  return failed ? 1 : 0;
}

}  // namespace gradpress::bench::cuda
