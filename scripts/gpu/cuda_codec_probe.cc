// gp-cuda-codec-probe: what gradpress's codecs cost on CUDA tensors, built and run only by
// scripts/gpu/build_and_test.sh on a GPU machine (not part of the CMake project).
//
//   gp-cuda-codec-probe [numel] [repeats]        # defaults: 25000000 7
//
// gradpress-bench codecs times the host kernels (EncodeTo/DecodeTo on float32 memory). A
// worker training on CUDA goes through the tensor-facing Compressor::Encode(tensor) and
// Decode(payload, device) instead, which copy CUDA input to a host float32 tensor first and
// the decoded host tensor back (compressors/compressor.h). Per codec this prints the median
// of `repeats` runs of:
//   enc_cpu  Encode(host tensor)            enc_cuda  Encode(CUDA tensor): D2H copy + encode
//   dec_cpu  Decode(payload) -> host        dec_cuda  Decode(payload, cuda) + synchronize
// as GB/s of dense float32 (4 numel bytes / seconds), and checks that a CUDA input gives the
// same payload bytes as the same values on the host (two fresh codecs, same step context)
// and that Decode(p, cuda) lands on the GPU. Reference rows: the bare D2H / H2D copies
// (pageable host memory), torch::topk of 1% on the GPU, and the small copies of one LeNet
// step (per tensor, pageable or pinned, against one flat copy).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"

namespace {

namespace gc = gradpress::compressors;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Median seconds of fn(run), the device synchronized before and after each run.
template <typename Fn>
double MedianSeconds(int repeats, Fn&& fn) {
  std::vector<double> s;
  for (int run = 1; run <= repeats; ++run) {
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn(run);
    torch::cuda::synchronize();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(s);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 25'000'000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gp-cuda-codec-probe: torch::cuda::is_available() is false\n");
    return 1;
  }
  torch::set_num_threads(1);  // as gradpress-bench codecs: single-thread codec kernels
  gc::RegisterBuiltinCompressors();
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(20240601);
  const torch::Tensor host = (torch::randn({n}) * 0.01f).contiguous();
  const torch::Tensor dev = host.to(cuda);
  const double dense = 4.0 * static_cast<double>(n);
  auto gbps = [dense](double s) { return dense / s / 1e9; };

  std::printf("gp-cuda-codec-probe: numel=%lld repeats=%d device=%s\n", static_cast<long long>(n),
              repeats, torch::cuda::device_count() > 0 ? "cuda:0" : "?");
  const double d2h = MedianSeconds(repeats, [&](int) { auto t = dev.to(torch::kCPU); });
  const double h2d = MedianSeconds(repeats, [&](int) { auto t = host.to(cuda); });
  const double topk = MedianSeconds(
      repeats, [&](int) { auto r = torch::topk(dev.abs(), std::max<int64_t>(1, n / 100)); });
  std::printf(
      "reference: D2H copy %.2f GB/s (%.2f ms), H2D copy %.2f GB/s (%.2f ms), "
      "torch::topk 1%% on GPU %.2f ms\n",
      gbps(d2h), d2h * 1e3, gbps(h2d), h2d * 1e3, topk * 1e3);

  // The copies a LeNet step makes on CUDA (its 10 tensors, 61706 floats): the worker's
  // Encode copies each gradient to the host and its decode copy_()s each received tensor
  // back, one small pageable copy per tensor. Against: one flat copy of all of it, and
  // per-tensor copies from pinned host memory.
  {
    const std::vector<std::vector<int64_t>> shapes = {
        {6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {120, 400}, {120}, {84, 120}, {84}, {10, 84}, {10}};
    std::vector<torch::Tensor> h, hp, d;
    int64_t total = 0;
    for (const auto& s : shapes) {
      h.push_back(torch::randn(s));
      hp.push_back(h.back().pin_memory());
      d.push_back(h.back().to(cuda));
      total += h.back().numel();
    }
    const torch::Tensor flat_h = torch::randn({total}), flat_d = flat_h.to(cuda);
    const int r = std::max(repeats, 51);
    const double h2d_each = MedianSeconds(r, [&](int) {
      for (size_t i = 0; i < d.size(); ++i) d[i].copy_(h[i]);
    });
    const double h2d_pinned = MedianSeconds(r, [&](int) {
      for (size_t i = 0; i < d.size(); ++i) d[i].copy_(hp[i], /*non_blocking=*/true);
    });
    const double h2d_flat = MedianSeconds(r, [&](int) { flat_d.copy_(flat_h); });
    const double d2h_each = MedianSeconds(r, [&](int) {
      for (const auto& t : d) auto c = t.to(torch::kCPU);
    });
    const double d2h_flat = MedianSeconds(r, [&](int) { auto c = flat_d.to(torch::kCPU); });
    std::printf(
        "lenet step copies (%zu tensors, %lld floats, median of %d): H2D per tensor "
        "%.1f us, per tensor from pinned %.1f us, one flat %.1f us; D2H per tensor "
        "%.1f us, one flat %.1f us\n",
        d.size(), static_cast<long long>(total), r, h2d_each * 1e6, h2d_pinned * 1e6,
        h2d_flat * 1e6, d2h_each * 1e6, d2h_flat * 1e6);
  }

  std::vector<gradpress::CodecSpec> configs;
  for (const auto& name : gc::RegisteredCompressorNames()) {
    gradpress::CodecSpec c;
    c.codec = name;
    configs.push_back(c);
  }
  {
    gradpress::CodecSpec c = gradpress::ParseCodecShorthand("topk");
    c.then =
        std::make_shared<gradpress::CodecSpec>(gradpress::ParseCodecShorthand("qsgd levels=16"));
    configs.push_back(c);
  }

  std::printf("%-12s %9s %12s %12s %12s %12s %10s %10s %s\n", "codec", "ratio", "enc_cpu GB/s",
              "enc_cuda GB/s", "dec_cpu GB/s", "dec_cuda GB/s", "enc_cuda ms", "dec_cuda ms",
              "checks");
  int failures = 0;
  for (const auto& config : configs) {
    auto codec = gc::MakeCompressor(config);
    // Same payload from the same values on either device (fresh codecs, same context).
    auto a = gc::MakeCompressor(config), b = gc::MakeCompressor(config);
    const gc::Payload pa = a->Encode(host, {"probe", 0});
    const gc::Payload pb = b->Encode(dev, {"probe", 0});
    const bool same_bytes = pa.bytes == pb.bytes && pa.shape == pb.shape;
    const torch::Tensor back = codec->Decode(pb, cuda);
    const bool on_gpu = back.is_cuda();
    const bool same_decode = torch::equal(back.cpu(), codec->Decode(pa));
    const bool ok = same_bytes && on_gpu && same_decode;
    failures += ok ? 0 : 1;

    gc::Payload p;
    const double enc_cpu = MedianSeconds(repeats, [&](int run) {
      p = codec->Encode(host, {"probe", run});
    });
    const double enc_cuda = MedianSeconds(repeats, [&](int run) {
      p = codec->Encode(dev, {"probe", run});
    });
    const double dec_cpu = MedianSeconds(repeats, [&](int) { auto t = codec->Decode(p); });
    const double dec_cuda = MedianSeconds(repeats, [&](int) { auto t = codec->Decode(p, cuda); });
    std::printf("%-12s %9.2f %12.3f %12.3f %12.3f %12.3f %10.2f %10.2f %s\n", p.codec.c_str(),
                p.Ratio(), gbps(enc_cpu), gbps(enc_cuda), gbps(dec_cpu), gbps(dec_cuda),
                enc_cuda * 1e3, dec_cuda * 1e3,
                ok ? "ok"
                   : (std::string("FAIL") + (same_bytes ? "" : " bytes") +
                      (on_gpu ? "" : " device") + (same_decode ? "" : " decode"))
                         .c_str());
  }
  std::printf("gp-cuda-codec-probe: %d of %zu codecs failed a check\n", failures, configs.size());
  return failures == 0 ? 0 : 2;
}
