#pragma once
// The CUDA codec bench (issue 32's "Must reach" table): every device codec encodes a gradient
// in device memory into its payload in pinned host memory and decodes a pinned payload into
// device memory, timed by wall clock (each call returns when its result is in place), next
// to reference copies measured in the same run (device-to-device of the dense gradient, and
// pinned device-to-host / host-to-device of it and of each codec's payload); each row's
// targets are evaluated against this run's references.
//
//   gradpress-cuda-bench [--numel 25000000] [--repeats 20] [--codec SPEC]... [--json]
//                        [--torch-topk-us X]
//   gradpress-bench codecs --device cuda [...]   (the full build; measures torch::topk itself)
//
// No LibTorch here: the CUDA-only build (scripts/gpu/check.sh) links it too.
// Thread-safety: call from main only.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradpress::bench::cuda {

// Exit status when no CUDA device is usable (ctest's and check.sh's "skipped").
constexpr int kNoDeviceExitCode = 77;

struct CudaBenchOptions {
  int64_t numel = 25'000'000;
  int repeats = 20;                // timed runs per figure, after 2 warm-ups; the median counts
  std::vector<std::string> specs;  // codec shorthands; empty: DefaultCudaBenchSpecs()
  bool json = false;               // one JSON object per row on stdout, nothing else
  double torch_topk_us = -1;       // torch.topk(|g|, N / 100) on CUDA in the same run; < 0: none
  // When set (gradpress-bench, which links LibTorch): measures torch_topk_us itself, in
  // microseconds (< 0: no CUDA in LibTorch), once the options are checked and the device found.
  std::function<double(int64_t numel, int repeats)> measure_torch_topk_us;
};

// The codecs with default parameters (ratio 0.01 for the sparsifiers).
std::vector<std::string> DefaultCudaBenchSpecs();

// Checks the options (InvalidArgument naming the bad one, before anything is measured), then
// measures and prints the table (progress on stderr). Returns 0, or kNoDeviceExitCode after
// a message on stderr when no CUDA device is usable.
int RunCudaCodecsBench(const CudaBenchOptions& opt);

}  // namespace gradpress::bench::cuda
