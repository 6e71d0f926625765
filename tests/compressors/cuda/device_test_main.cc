// Catch2 main of the GPU codec tests: without a usable CUDA device they report skipped (exit
// 77, ctest's SKIP_RETURN_CODE) instead of failing, so the CPU-only machines and CI stay
// green; listing the tests (--list-tests, --list-tags, ...) needs no device.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdio>

namespace {
constexpr int kSkippedExitCode = 77;
}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  const int rc = session.applyCommandLine(argc, argv);
  if (rc != 0) return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags ||
                       config.listReporters || config.showHelp || config.libIdentify;
  if (listing) return session.run();
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return kSkippedExitCode;
  }
  // Catch returns the number of failed assertions (at most 255): 77 of them must not read as
  // "skipped", nor 124 as a timeout.
  return session.run() == 0 ? 0 : 1;
}
