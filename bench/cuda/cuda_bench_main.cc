// gradpress-cuda-bench: the CUDA codec table (cuda_bench.h) in the CUDA-only build, which has
// no CLI11: the few options are parsed here.
//
//   gradpress-cuda-bench [--numel N] [--repeats R] [--codec SPEC]... [--json]
//                        [--torch-topk-us X]
//
// Exit status: 0 on success, 2 on bad command-line input, 77 without a CUDA device, 1 on any
// other failure.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "bench/cuda/cuda_bench.h"
#include "common/error.h"

namespace {

namespace cb = gradpress::bench::cuda;

constexpr int kUsageExitCode = 2;

constexpr char kUsage[] =
    "usage: gradpress-cuda-bench [--numel N] [--repeats R] [--codec SPEC]... [--json]\n"
    "                            [--torch-topk-us X]\n"
    "  --numel N          float32 elements of the test gradient (default 25000000)\n"
    "  --repeats R        timed runs per figure after 2 warm-ups; the median counts (default "
    "20, >= 5)\n"
    "  --codec SPEC       codec shorthand, repeatable, replaces the default rows:\n"
    "                     \"qsgd levels=8\", \"topk ratio=0.01 then=qsgd levels=16\"\n"
    "  --json             one JSON object per row on stdout, nothing else\n"
    "  --torch-topk-us X  torch.topk(|g|, N/100) on CUDA in the same run, in microseconds\n"
    "                     (scripts/gpu/torch_reference.py): adds the 5x torch_topk target\n";

int64_t ParseInt(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  GP_ENFORCE(!text.empty() && errno == 0 && *end == '\0', flag, " expects an integer, got '", text,
             "'");
  return v;
}

double ParsePositive(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  GP_ENFORCE(!text.empty() && errno == 0 && *end == '\0' && std::isfinite(v) && v > 0, flag,
             " expects a positive number, got '", text, "'");
  return v;
}

// Throws InvalidArgument naming the bad argument; *help on --help / -h.
cb::CudaBenchOptions Parse(int argc, char** argv, bool* help) {
  cb::CudaBenchOptions opt;
  *help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      GP_ENFORCE(i + 1 < argc, arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      *help = true;
    } else if (arg == "--numel") {
      opt.numel = ParseInt(arg, value());
    } else if (arg == "--repeats") {
      const int64_t r = ParseInt(arg, value());
      GP_ENFORCE(r >= 5 && r <= 1000, "--repeats must be in [5, 1000], got ", r);
      opt.repeats = static_cast<int>(r);
    } else if (arg == "--codec") {
      opt.specs.push_back(value());
    } else if (arg == "--json") {
      opt.json = true;
    } else if (arg == "--torch-topk-us") {
      opt.torch_topk_us = ParsePositive(arg, value());
    } else {
      throw gradpress::InvalidArgument("unknown argument '" + arg + "'");
    }
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool help = false;
    const cb::CudaBenchOptions opt = Parse(argc, argv, &help);
    if (help) {
      std::cout << kUsage;
      return 0;
    }
    return cb::RunCudaCodecsBench(opt);
  } catch (const gradpress::InvalidArgument& e) {
    std::cerr << "gradpress-cuda-bench: error: " << e.message() << "\n" << kUsage;
    return kUsageExitCode;
  } catch (const std::exception& e) {
    std::cerr << "gradpress-cuda-bench: failed: " << e.what() << "\n";
    return 1;
  }
}
