#include "worker/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/error.h"

namespace gradpress::worker::data {
namespace {

// One file read through zlib: gzip is decompressed, anything else is passed through.
class GzFile {
 public:
  explicit GzFile(const std::string& file) : file_(file) {
    errno = 0;
    gz_ = gzopen(file.c_str(), "rb");
    GP_ENFORCE(gz_ != nullptr, file, ": cannot open: ", errno ? std::strerror(errno) : "no memory");
    gzbuffer(gz_, 1 << 18);
  }
  ~GzFile() { gzclose(gz_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to n bytes into dst; fewer only at the end of the data. Throws on a read error
  // or a corrupt / truncated gzip stream.
  size_t Read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(gz_, static_cast<char*>(dst) + done, chunk);
      CheckError();
      if (got <= 0) break;
      done += static_cast<size_t>(got);
      if (static_cast<unsigned>(got) < chunk) break;
    }
    return done;
  }

 private:
  void CheckError() {
    int err = Z_OK;
    std::string message = gzerror(gz_, &err);
    GP_ENFORCE(err != Z_ERRNO, file_, ": read error: ", std::strerror(errno));
    if (message.rfind(file_ + ": ", 0) == 0) message.erase(0, file_.size() + 2);  // zlib's prefix
    GP_ENFORCE(err == Z_OK, file_, ": corrupt or truncated gzip stream (", message, ")");
  }

  std::string file_;
  gzFile gz_;
};

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Reads the magic and the dims of an IDX file of unsigned bytes; `what` is "images" or
// "labels" for the messages. The number of dims is the magic's low byte.
std::vector<int64_t> ReadHeader(GzFile* in, const std::string& file, uint32_t magic,
                                const char* what) {
  const int ndims = static_cast<int>(magic & 0xFF);
  uint8_t buf[4];
  const size_t got = in->Read(buf, 4);
  GP_ENFORCE(got == 4, file, ": not an IDX ", what, " file: ", got,
             " bytes, shorter than the 4-byte magic ", Hex32(magic));
  const uint32_t found = BigEndian32(buf);
  GP_ENFORCE(found == magic, file, ": not an IDX ", what, " file: magic ", Hex32(found),
             ", expected ", Hex32(magic), " (unsigned bytes, ", ndims,
             ndims == 1 ? " dim)" : " dims)");
  std::vector<int64_t> dims;
  for (int d = 0; d < ndims; ++d) {
    GP_ENFORCE(in->Read(buf, 4) == 4, file, ": truncated: the header ends inside dim ", d + 1,
               " of ", ndims, " (expected a ", 4 + 4 * ndims, "-byte header)");
    dims.push_back(BigEndian32(buf));
  }
  return dims;
}

// Reads exactly the product of dims bytes that follow a header of header_bytes and checks
// that nothing follows them. Returns uint8 with shape dims.
torch::Tensor ReadData(GzFile* in, const std::string& file, const std::vector<int64_t>& dims,
                       int header_bytes) {
  int64_t expected = 1;
  for (int64_t d : dims) {
    GP_ENFORCE(!__builtin_mul_overflow(expected, d, &expected), file, ": header says ",
               DimsString(dims), " bytes, more than any file holds; not an IDX file");
  }
  auto buffer = std::make_unique<std::vector<uint8_t>>();
  buffer->reserve(static_cast<size_t>(std::min<int64_t>(expected, int64_t{64} << 20)));
  const size_t kChunk = size_t{16} << 20;
  while (static_cast<int64_t>(buffer->size()) < expected) {
    const size_t old = buffer->size();
    const size_t want = std::min<size_t>(kChunk, static_cast<size_t>(expected) - old);
    buffer->resize(old + want);
    const size_t got = in->Read(buffer->data() + old, want);
    buffer->resize(old + got);
    if (got < want) break;
  }
  GP_ENFORCE(static_cast<int64_t>(buffer->size()) == expected, file, ": truncated: header says ",
             DimsString(dims), " = ", expected, " bytes, file has ", buffer->size(), " (after the ",
             header_bytes, "-byte header)");
  uint8_t extra;
  GP_ENFORCE(in->Read(&extra, 1) == 0, file, ": longer than its header says (", DimsString(dims),
             " = ", expected, " bytes after the ", header_bytes,
             "-byte header); not an IDX file of that shape");
  std::vector<uint8_t>* raw = buffer.get();
  torch::Tensor t = torch::from_blob(
      raw->data(), dims, [raw](void*) { delete raw; }, torch::kUInt8);
  buffer.release();  // now owned by t's deleter
  return t;
}

std::string Join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

std::string ResolveIdxFile(const std::string& dir, const std::string& stem) {
  const std::string raw = Join(dir, stem);
  const std::string gz = raw + ".gz";
  std::error_code ec;
  if (std::filesystem::is_regular_file(raw, ec)) return raw;
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  GP_ENFORCE(false, "IDX file missing: neither ", raw, " nor ", gz, " exists");
  return {};
}

torch::Tensor ReadIdxImages(const std::string& file) {
  GzFile in(file);
  const std::vector<int64_t> dims = ReadHeader(&in, file, kIdxImagesMagic, "images");
  GP_ENFORCE(dims[1] > 0 && dims[2] > 0, file, ": header says images of ", dims[1], "x", dims[2],
             " pixels; expected both dims positive");
  return ReadData(&in, file, dims, 16);
}

torch::Tensor ReadIdxLabels(const std::string& file, int64_t num_classes) {
  GzFile in(file);
  const std::vector<int64_t> dims = ReadHeader(&in, file, kIdxLabelsMagic, "labels");
  torch::Tensor labels = ReadData(&in, file, dims, 8);
  const uint8_t* p = labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    GP_ENFORCE(p[i] < num_classes, file, ": label ", int{p[i]}, " at index ", i, " is not below ",
               num_classes);
  }
  return labels.to(torch::kInt64);
}

RawSplit ReadIdxSplit(const std::string& dir, const std::string& prefix, int64_t rows,
                      int64_t cols) {
  const std::string images_file = ResolveIdxFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_file = ResolveIdxFile(dir, prefix + "-labels-idx1-ubyte");
  torch::Tensor images = ReadIdxImages(images_file);
  GP_ENFORCE(images.size(1) == rows && images.size(2) == cols, images_file, ": images are ",
             images.size(1), "x", images.size(2), ", expected ", rows, "x", cols);
  torch::Tensor labels = ReadIdxLabels(labels_file);
  GP_ENFORCE(images.size(0) == labels.size(0), images_file, " has ", images.size(0), " images but ",
             labels_file, " has ", labels.size(0), " labels; expected one label per image");
  return {images.unsqueeze(1), labels};
}

}  // namespace gradpress::worker::data
