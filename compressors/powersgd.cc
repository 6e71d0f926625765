#include "compressors/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/byte_io.h"

namespace gradpress::compressors {
namespace {

constexpr int kMaxRank = 255;
constexpr int64_t kMaxDim = std::numeric_limits<uint32_t>::max();
// A Gram-Schmidt column keeping less than this fraction of its norm lies (numerically) in the
// span of the earlier ones: normalising it would amplify float noise, so it becomes zero.
constexpr double kDependent = 1e-4;

// Each kernel walks M (or the output) once, row by row; a row (cols floats, 20 KB at 5000)
// stays in L1 while it meets the r columns, so every inner loop is a plain unit-stride dot
// product or axpy that the compiler vectorises (eight float lanes for the sums). Encode
// reads M twice (M Q, then M^T P), decode writes it once.

float Dot8(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  double s = 0.0;
  for (; j < n; ++j) s += a[j] * b[j];
  for (float x : acc) s += x;
  return static_cast<float>(s);
}

// P = M Q: p[k * rows + i] = <row i of M, column k of Q>.
void MulQ(const float* m, int64_t rows, int64_t cols, const float* q, int r, float* p) {
  for (int64_t i = 0; i < rows; ++i)
    for (int k = 0; k < r; ++k) p[k * rows + i] = Dot8(m + i * cols, q + k * cols, cols);
}

// Q = M^T P: column k of Q = sum_i p[k * rows + i] (row i of M).
void MulTransposedP(const float* m, int64_t rows, int64_t cols, const float* p, int r,
                    float* __restrict q) {
  std::fill(q, q + static_cast<size_t>(r) * cols, 0.f);
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = m + i * cols;
    for (int k = 0; k < r; ++k) {
      const float c = p[k * rows + i];
      float* __restrict qk = q + k * cols;
      for (int64_t j = 0; j < cols; ++j) qk[j] += c * row[j];
    }
  }
}

// out = P Q^T: row i of out = sum_k p[k * rows + i] (column k of Q).
void MulPQt(const float* p, const float* q, int64_t rows, int64_t cols, int r,
            float* __restrict out) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict o = out + i * cols;
    const float c0 = p[i];
    const float* __restrict q0 = q;
    for (int64_t j = 0; j < cols; ++j) o[j] = c0 * q0[j];
    for (int k = 1; k < r; ++k) {
      const float c = p[k * rows + i];
      const float* __restrict qk = q + k * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] += c * qk[j];
    }
  }
}

double Dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Modified Gram-Schmidt over r columns of `rows` floats, each column projected twice
// ("twice is enough", Giraud et al. 2005) so the columns are orthonormal to float precision.
void Orthonormalise(float* p, int64_t rows, int r) {
  for (int k = 0; k < r; ++k) {
    float* col = p + static_cast<size_t>(k) * rows;
    const double before = std::sqrt(Dot(col, col, rows));
    for (int pass = 0; pass < 2; ++pass) {
      for (int l = 0; l < k; ++l) {
        const float* prev = p + static_cast<size_t>(l) * rows;
        const auto d = static_cast<float>(Dot(prev, col, rows));
        if (d != 0.f)
          for (int64_t i = 0; i < rows; ++i) col[i] -= d * prev[i];
      }
    }
    const double after = std::sqrt(Dot(col, col, rows));
    if (!(after > kDependent * before)) {
      std::fill(col, col + rows, 0.f);
    } else {
      const auto inv = static_cast<float>(1.0 / after);
      for (int64_t i = 0; i < rows; ++i) col[i] *= inv;
    }
  }
}

bool AllFinite(const float* v, size_t n) {
  float probe = 0.f;  // x - x is NaN for NaN and Inf
  for (size_t i = 0; i < n; ++i) probe += v[i] - v[i];
  return probe == 0.f;
}

// Copies n floats from the wire (unaligned) and checks they are finite.
std::vector<float> ReadFloats(ByteReader& r, size_t n, const char* field) {
  std::string_view raw = r.GetBytes(n * sizeof(float), field);
  std::vector<float> v(n);
  if (n) std::memcpy(v.data(), raw.data(), raw.size());
  GP_ENFORCE(AllFinite(v.data(), n), "powersgd: ", field, " holds a NaN or Inf");
  return v;
}

}  // namespace

PowerSgdCompressor::PowerSgdCompressor(ParamReader& r)
    : rank_(static_cast<int>(r.Int("rank", 2, 1, kMaxRank))),
      rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}

void PowerSgdCompressor::MatrixView(int64_t n, int64_t* rows, int64_t* cols) {
  if (n <= 0) {
    *rows = *cols = 0;
    return;
  }
  auto r = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && r * r > n) --r;
  while ((r + 1) * (r + 1) <= n) ++r;
  while (n % r) --r;
  *rows = r;
  *cols = n / r;
}

bool PowerSgdCompressor::LowRankPays(int64_t rows, int64_t cols, int r) {
  return static_cast<double>(r) * static_cast<double>(rows + cols) <
         static_cast<double>(rows) * static_cast<double>(cols);
}

void PowerSgdCompressor::InitQ(int64_t rows, int64_t cols) {
  q_.resize(static_cast<size_t>(rank_) * cols);
  for (size_t i = 0; i < q_.size(); i += 2) {  // Box-Muller: two normals per draw
    float u1, u2;
    rng_.Uniform2(&u1, &u2);
    const double radius = std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(u1)));
    const double angle = 6.283185307179586 * u2;
    q_[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < q_.size()) q_[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
  q_rows_ = rows;
  q_cols_ = cols;
}

void PowerSgdCompressor::RedrawZeroColumns() {
  for (int k = 0; k < rank_; ++k) {
    float* col = q_.data() + static_cast<size_t>(k) * q_cols_;
    if (std::any_of(col, col + q_cols_, [](float x) { return x != 0.f; })) continue;
    for (int64_t j = 0; j < q_cols_; ++j) col[j] = rng_.Uniform() * 2.f - 1.f;
  }
}

void PowerSgdCompressor::EncodeTo(const float* in, int64_t n, const StepContext&,
                                  std::string* out) {
  int64_t rows, cols;
  MatrixView(n, &rows, &cols);
  GP_ENFORCE(cols <= kMaxDim, "powersgd: a ", rows, " x ", cols,
             " view has a dimension over 2^32 - 1");
  ByteWriter w(out);
  w.Put<uint32_t>(static_cast<uint32_t>(rows));
  w.Put<uint32_t>(static_cast<uint32_t>(cols));
  if (!LowRankPays(rows, cols, rank_)) {
    GP_ENFORCE(AllFinite(in, static_cast<size_t>(n)), "powersgd: the tensor has a NaN or Inf");
    w.Put<uint8_t>(0);
    w.PutBytes(in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  w.Put<uint8_t>(static_cast<uint8_t>(rank_));
  if (q_.empty() || q_rows_ != rows || q_cols_ != cols) InitQ(rows, cols);
  p_.resize(static_cast<size_t>(rank_) * rows);
  next_q_.resize(q_.size());
  MulQ(in, rows, cols, q_.data(), rank_, p_.data());
  // A NaN or Inf anywhere in M reaches its row of P (x * q is NaN for x NaN, or Inf and q = 0).
  GP_ENFORCE(AllFinite(p_.data(), p_.size()), "powersgd: the tensor has a NaN or Inf");
  Orthonormalise(p_.data(), rows, rank_);
  MulTransposedP(in, rows, cols, p_.data(), rank_, next_q_.data());
  GP_ENFORCE(AllFinite(next_q_.data(), next_q_.size()), "powersgd: M^T P overflows float32");
  w.PutBytes(p_.data(), p_.size() * sizeof(float));
  w.PutBytes(next_q_.data(), next_q_.size() * sizeof(float));
  q_.swap(next_q_);
  RedrawZeroColumns();
}

void PowerSgdCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "powersgd");
  const int64_t rows = r.Get<uint32_t>("rows");
  const int64_t cols = r.Get<uint32_t>("cols");
  const int rank = r.Get<uint8_t>("rank");
  GP_ENFORCE(static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) == static_cast<uint64_t>(n),
             "powersgd: a ", rows, " x ", cols, " matrix for ", n, " elements");
  if (rank == 0) {
    std::string_view raw = r.GetBytes(static_cast<size_t>(n) * sizeof(float), "raw values");
    r.ExpectEnd();
    if (n) std::memcpy(out, raw.data(), raw.size());
    GP_ENFORCE(AllFinite(out, static_cast<size_t>(n)), "powersgd: raw values hold a NaN or Inf");
    return;
  }
  // Lengths first (no allocation from a forged header): exactly r (rows + cols) floats.
  GP_ENFORCE(r.remaining() == static_cast<size_t>(rank) * (rows + cols) * sizeof(float),
             "powersgd: ", r.remaining(), " bytes of factors for rank ", rank, " and a ", rows,
             " x ", cols, " matrix");
  const std::vector<float> p = ReadFloats(r, static_cast<size_t>(rank) * rows, "P");
  const std::vector<float> q = ReadFloats(r, static_cast<size_t>(rank) * cols, "Q");
  r.ExpectEnd();
  MulPQt(p.data(), q.data(), rows, cols, rank, out);
}

void PowerSgdCompressor::SaveState(std::string* out) const {
  ByteWriter w(out);
  w.Put<uint64_t>(rng_.state());
  w.Put<uint8_t>(static_cast<uint8_t>(rank_));
  w.Put<uint32_t>(static_cast<uint32_t>(q_rows_));
  w.Put<uint32_t>(static_cast<uint32_t>(q_cols_));
  w.PutBytes(q_.data(), q_.size() * sizeof(float));
}

void PowerSgdCompressor::LoadState(std::string_view in) {
  ByteReader r(in, "powersgd state");
  const auto rng_state = r.Get<uint64_t>("rng state");
  const int rank = r.Get<uint8_t>("rank");
  GP_ENFORCE(rank == rank_, "powersgd state: rank ", rank, ", this codec has rank ", rank_);
  const int64_t rows = r.Get<uint32_t>("rows");
  const int64_t cols = r.Get<uint32_t>("cols");
  GP_ENFORCE((rows == 0) == (cols == 0) && (rows == 0 || LowRankPays(rows, cols, rank_)),
             "powersgd state: Q for a ", rows, " x ", cols, " view");
  GP_ENFORCE(r.remaining() == static_cast<size_t>(rank) * cols * sizeof(float),
             "powersgd state: ", r.remaining(), " bytes of Q, expected ", rank, " x ", cols,
             " floats");
  std::vector<float> q = ReadFloats(r, static_cast<size_t>(rank) * cols, "Q");
  r.ExpectEnd();
  rng_.set_state(rng_state);
  q_ = std::move(q);
  q_rows_ = rows;
  q_cols_ = cols;
}

}  // namespace gradpress::compressors
