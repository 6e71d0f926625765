#pragma once
// powersgd: Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression
// for Distributed Optimization", NeurIPS 2019 (Algorithm 1, rank r, one power iteration).
//
// The n floats are viewed as a row-major matrix M (rows x cols); with the previous step's Q
// (cols x r) as a warm start, one step of subspace iteration:
//   P = M Q                 (rows x r)
//   P = GramSchmidt(P)      orthonormal columns (modified Gram-Schmidt, done twice); a column
//                           left with under 1e-4 of its norm after projection is set to zero
//   Q = M^T P               (cols x r), kept as the next step's warm start
//   D(M) = P Q^T = P P^T M  the projection of M onto span(P)
// If rank(M) <= r, span(P) = span(M) for a generic Q, so D(M) = M up to float rounding
// (epsilon times the conditioning of M Q: 1e-7 to 1e-5 relative in the tests).
// Q starts as i.i.d. N(0, 1) from the seeded Rng (rng.h), so every worker's instance for a
// key starts from the same Q, as in the paper; a zero column of Q (from a zero gradient) is
// redrawn, uniform in [-1, 1), before the next step, so the rank never collapses.
// PowerSGD is biased: use it with error_feedback: true (Algorithm 2 of the paper; the
// generic ErrorFeedback decorator, e = M - P Q^T).
//
// The matrix view: the paper reshapes a layer to (first dim) x (rest), but the kernels see
// only the element count (compressor.h), so rows is the largest divisor of n not above
// sqrt(n) and cols = n / rows: the squarest view, which maximises rows cols / (r (rows +
// cols)). The payload carries rows and cols, so a decoder follows whatever view the encoder
// chose. When low rank does not pay, r (rows + cols) >= rows cols (scalars, empty and tiny
// tensors, prime n: 1 x n), the payload holds M raw in the same format (r = 0). 1-D bias and
// BatchNorm tensors go uncompressed by the caller's skip_1d (compressor_config.h).
//
// Through the server: a payload carries its own P and Q, so MakeDecoder("powersgd") decodes
// any of them statelessly. The server averages the W decoded rank-r matrices (rank <= W r;
// the paper instead all-reduces P, then Q, which needs a shared Q and linear aggregation),
// and a powersgd pull codec, one instance per key with its own warm-started Q, compresses
// that average back to rank r.
//
// Wire format (little-endian):
//   u32 rows   u32 cols   (rows * cols = n)   u8 r (0 = raw)
//   r = 0:  n f32, M row-major
//   r >= 1: P as r columns of rows f32, then Q as r columns of cols f32; all finite
// Bytes: 9 + 4 r (rows + cols); raw 9 + 4 n. 25M floats (5000 x 5000) at r = 2: 80009.
//
// Parameters: rank (2: the paper reaches SGD's accuracy on ResNet-18 / CIFAR-10 with rank 2,
// and its cost is 2 (rows + cols) floats, so LeNet-sized tensors still compress; 1..255),
// seed (1, Q's initial draw).
// State (checkpoints): u64 Rng state, u8 r, u32 rows, u32 cols, r columns of cols f32 (Q;
// rows = cols = 0 before the first low-rank encode). Encode mutates Q: one instance per key
// and per side; a tensor of another shape restarts Q from the Rng. Decode is const.
#include <vector>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/rng.h"

namespace gradpress::compressors {

class PowerSgdCompressor : public Compressor {
 public:
  explicit PowerSgdCompressor(ParamReader& r);
  std::string Name() const override { return "powersgd"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;

  // The squarest rows x cols view of n elements (rows <= cols; 0 x 0 for n = 0).
  static void MatrixView(int64_t n, int64_t* rows, int64_t* cols);
  // Whether rank r pays for a rows x cols matrix: r (rows + cols) < rows cols.
  static bool LowRankPays(int64_t rows, int64_t cols, int r);

 private:
  void InitQ(int64_t rows, int64_t cols);
  void RedrawZeroColumns();

  int rank_;
  Rng rng_;
  int64_t q_rows_ = 0, q_cols_ = 0;  // the view Q belongs to
  std::vector<float> q_;             // warm start: rank_ columns of q_cols_
  std::vector<float> p_, next_q_;    // scratch, reused
};

}  // namespace gradpress::compressors
