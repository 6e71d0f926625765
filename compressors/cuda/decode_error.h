#pragma once
// The decode errors the GPU codecs' kernels find in payload content (DecodeError), and the
// message the host reports for each. Shared by the kernels, the host runtime
// (device_runtime.cu) and the host twins; plain C++, no CUDA header.
//
// Thread-safety: constants and a pure function.
namespace gradpress::compressors::cuda {

// A kernel that finds malformed payload content records the first code in a device word
// (atomicCAS from 0) and writes nothing out of range; the host throws InvalidArgument with
// DecodeErrorText(code) after the stream synchronises.
enum DecodeError : int {
  kDecodeOk = 0,
  kIndexOutOfRange = 1,  // an index >= numel
  kIndexOrder = 2,       // int32 indices not strictly increasing
  kGapOutOfRange = 3,    // a delta gap >= numel
  kVarintTooLong = 4,    // a varint longer than 10 bytes or over 64 bits
  kIndexCount = 5,       // the index bytes hold another number of varints than k
  kLevelAboveS = 6,      // a qsgd level above s
  kBadSymbol = 7,        // terngrad's symbol 3
  kBadScale = 8,         // a NaN, Inf or negative scale or norm
  kPaddingBits = 9,      // non-zero padding bits at the end of a bit stream
  kNonFiniteInput = 10,  // encode: NaN or Inf in the input (int8, qsgd, terngrad, onebit)
};
inline const char* DecodeErrorText(int code) {
  switch (code) {
    case kIndexOutOfRange:
      return "index out of range";
    case kIndexOrder:
      return "indices out of order";
    case kGapOutOfRange:
      return "index gap out of range";
    case kVarintTooLong:
      return "varint too long";
    case kIndexCount:
      return "index bytes do not hold k indices";
    case kLevelAboveS:
      return "level exceeds s";
    case kBadSymbol:
      return "invalid ternary symbol 3";
    case kBadScale:
      return "a scale or norm that is NaN, Inf or negative";
    case kPaddingBits:
      return "non-zero padding bits at the end of the bit stream";
    case kNonFiniteInput:
      return "input has a NaN or Inf element";
    default:
      return "malformed payload";
  }
}

}  // namespace gradpress::compressors::cuda
