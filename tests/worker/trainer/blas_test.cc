// The BLAS under LibTorch: scripts/setup.sh installs OpenBLAS, which Debian's alternatives make
// LibTorch's libblas.so.3; DescribeBlas names it and SetComputeThreads sets its threads with
// LibTorch's. ctest also runs the [blas] cases with the reference BLAS put in front
// (LD_LIBRARY_PATH, GP_EXPECT_BLAS=reference): DescribeBlas must say so.
#include "worker/models/blas.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "tests/catch_torch.h"

namespace gradpress::testing {
namespace {

using worker::BlasInfo;

TEST_CASE("DescribeBlas names the BLAS LibTorch's matrix products run on", "[blas]") {
  const torch::Tensor a = torch::ones({64, 64});
  REQUIRE(torch::mm(a, a).sum().item<float>() == 64.0f * 64 * 64);  // the BLAS did the work
  const BlasInfo b = worker::DescribeBlas();
  INFO(b.ToString());
  REQUIRE(b.kind != BlasInfo::Kind::kNone);
  REQUIRE(!b.library.empty());
  const char* expect = std::getenv("GP_EXPECT_BLAS");
  if (expect != nullptr && std::string(expect) == "reference") {
    REQUIRE(b.reference());
    REQUIRE(b.ToString().find("reference") != std::string::npos);
  } else {
    // What scripts/setup.sh installs: an optimized BLAS is LibTorch's libblas.so.3.
    REQUIRE(b.kind == BlasInfo::Kind::kOpenBlas);
    REQUIRE(b.name.rfind("OpenBLAS", 0) == 0);
    REQUIRE(!b.reference());
  }
}

TEST_CASE("SetComputeThreads sets LibTorch's threads and the BLAS's own", "[blas]") {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int two = std::min(2, cores);
  worker::SetComputeThreads(two);
  REQUIRE(at::get_num_threads() == two);
  if (worker::DescribeBlas().kind == BlasInfo::Kind::kOpenBlas)
    REQUIRE(worker::DescribeBlas().threads == two);
  worker::SetComputeThreads(0);  // at least one
  REQUIRE(at::get_num_threads() == 1);
  if (worker::DescribeBlas().kind == BlasInfo::Kind::kOpenBlas)
    REQUIRE(worker::DescribeBlas().threads == 1);
}

}  // namespace
}  // namespace gradpress::testing
