#pragma once
// efsignsgd: EF-signSGD. Karimireddy, Rebjock, Stich and Jaggi, "Error Feedback Fixes SignSGD
// and other Gradient Compression Schemes", ICML 2019 (EF-SGD with the scaled sign).
//
//   p = g + e;   Delta = (||p||_1 / d) sign(p);   e = p - Delta
//
// That is exactly onebit with scaling mean (a = mean |p_i| = ||p||_1 / d per bucket,
// onebit.h) inside the ErrorFeedback decorator (error_feedback.h), so efsignsgd is a
// registry preset, not a codec: no kernel and no wire format of its own. MakeCompressor
// rewrites the config before building anything:
//   {codec: efsignsgd, bucket_size: B}  ->  {codec: onebit, scaling: mean, bucket_size: B,
//                                            error_feedback: true}
// (error_feedback: true on it is redundant; `scaling` or `then` on it are errors). Its
// payloads are onebit payloads (Payload::codec "onebit"), and the server decodes them with
// MakeDecoder("onebit"). Being a preset, it is not in RegisteredCompressorNames().
// The paper compresses lr g; gradpress compresses g and applies lr after decoding, which is
// the same for a constant lr (with a schedule the residual holds earlier steps' g unscaled,
// as with every error-feedback codec here).
//
// Wire format: onebit's, mode 0: u8 0, u32 bucket_size, ceil(n / bucket_size) f32 scales,
// n sign bits. Bytes: 5 + 4 ceil(n / bucket_size) + ceil(n / 8) (3.22% of fp32 at 1024).
//
// Parameters: bucket_size (onebit's 1024; a bucket_size >= numel gives the paper's one
// scale per tensor). State: ErrorFeedback's (the residual, then nothing for onebit).
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

inline constexpr char kEfSignSgd[] = "efsignsgd";

// The onebit config that an efsignsgd config stands for (config.codec must be "efsignsgd").
// Throws InvalidArgument if it sets scaling or has a `then`.
CodecSpec ExpandEfSignSgd(const CodecSpec& config);

}  // namespace gradpress::compressors
