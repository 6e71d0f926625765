#pragma once
// Shape helpers shared by every layer (no LibTorch).
//
//   int64_t n = NumelOf({2, 3});        // 6; InvalidArgument on a negative dim or overflow
//   std::string s = ShapeToString({2, 3});   // "[2, 3]"
// Thread-safety: pure functions.
#include <cstdint>
#include <string>
#include <vector>

namespace gradpress {

// Product of dims; throws InvalidArgument on a negative dim or int64 overflow.
int64_t NumelOf(const std::vector<int64_t>& shape);
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace gradpress
