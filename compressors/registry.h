#pragma once
// The codec registry: names -> factories, filled by RegisterBuiltinCompressors().
//
//   RegisterBuiltinCompressors();      // idempotent; call once at start-up
//   auto c = MakeCompressor(config);   // codec (+ `then` quantizer) (+ error feedback)
//
// MakeCompressor throws InvalidArgument for an unknown name (listing the known ones), an
// unknown or out-of-range parameter, or a `then` after a codec that is not a sparsifier.
// Thread-safety: register before threads start; MakeCompressor may then run concurrently.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

// Builds a bare codec from its parameters (reads them through the ParamReader).
using CompressorFactory = std::function<std::unique_ptr<Compressor>(ParamReader&)>;

void RegisterCompressor(const std::string& name, CompressorFactory factory);
void RegisterBuiltinCompressors();
std::vector<std::string> RegisteredCompressorNames();

std::unique_ptr<Compressor> MakeCompressor(const CodecSpec& config);

// A decoder for payloads whose Payload::codec is `name` ("qsgd", "topk+qsgd"). Wire formats
// are self-describing, so decoding needs no parameters: the server decodes any push with it.
// Throws InvalidArgument for an unknown name.
std::unique_ptr<Compressor> MakeDecoder(const std::string& name);

// The parameterless spec of a payload named `name` ("qsgd" or "topk+qsgd": codec, then), which
// MakeDecoder builds (and the GPU's MakeDeviceDecoder). Throws InvalidArgument on two '+'.
CodecSpec DecoderSpec(const std::string& name);

}  // namespace gradpress::compressors
