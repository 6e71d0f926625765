#include "compressors/tensor_bytes.h"

#include "common/error.h"
#include "tests/catch_torch.h"

namespace gradpress {

TEST_CASE("TensorToBytes and BytesToTensor round-trip", "[tensor_bytes]") {
  torch::Tensor t = torch::randn({3, 5}).t();  // non-contiguous view
  std::string b = TensorToBytes(t);
  CHECK(b.size() == 15 * 4);
  torch::Tensor u = BytesToTensor(b, {5, 3}, torch::kFloat32);
  CHECK(torch::equal(u, t.contiguous()));
  torch::Tensor h = torch::randn({4}).to(torch::kHalf);
  CHECK(torch::equal(BytesToTensor(TensorToBytes(h), {4}, torch::kHalf), h));
}

TEST_CASE("BytesToTensor and NumelOf reject bad sizes and shapes", "[tensor_bytes]") {
  CHECK_THROWS_AS(BytesToTensor(std::string(7, '\0'), {2}, torch::kFloat32), InvalidArgument);
  CHECK_THROWS_AS(NumelOf({2, -1}), InvalidArgument);
  CHECK_THROWS_AS(NumelOf({1ll << 40, 1ll << 40}), InvalidArgument);
  CHECK(NumelOf({}) == 1);
  CHECK(ShapeToString({2, 3}) == "[2, 3]");
}

}  // namespace gradpress
