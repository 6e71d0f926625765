#pragma once
// Adding a sparse push (the kept indices and values of a sparsifier, compressors/sparsifier.h)
// into an accumulator row in O(payload), with the very floats that adding its dense decode
// element by element gives (acc[e] += dense[e] for every e, dense zero where nothing was
// kept). Skipping an untouched element is exact for every value but one: -0.0 + 0.0 is
// +0.0. So each row remembers where it may hold -0.0 (SignedZeros), and an add turns those
// of them it does not touch into +0.0 as the dense add would; a row whose -0.0s are not known
// (a dense push landed in it) takes one dense pass, after which they are known again.
//
//   AssignSparse(idx, val, n, acc, &z);   // the step's first push: acc = dense decode
//   AddSparse(idx, val, n, acc, &z);      // a later one: acc += dense decode
// Thread-safety: none; the caller owns the row and its SignedZeros while it adds.
#include <cstdint>
#include <vector>

namespace gradpress::server {

// Where an accumulator row may hold -0.0.
struct SignedZeros {
  bool anywhere = true;     // not known (a dense push landed): any element may
  std::vector<int32_t> at;  // else: only these (increasing)
  void Unknown() {
    anywhere = true;
    at.clear();
  }
};

// acc[0, n) = the dense decode of (idx, val): val at idx, +0.0 elsewhere; *z exact.
void AssignSparse(const std::vector<int32_t>& idx, const std::vector<float>& val, int64_t n,
                  float* acc, SignedZeros* z);
// acc[e] += dense[e] for every e in [0, n), touching only idx and z's elements (every
// element once if z->anywhere); *z exact afterwards. idx strictly increasing, < n.
void AddSparse(const std::vector<int32_t>& idx, const std::vector<float>& val, int64_t n,
               float* acc, SignedZeros* z);

}  // namespace gradpress::server
