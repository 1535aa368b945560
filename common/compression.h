// Gradient compression: MXNet's 2-bit and 1-bit quantisation with error feedback.
//
// A worker quantises each pushed float32 gradient g with a residual r kept per key (and per
// device in an in-process store), element by element:
//
//   2bit, threshold t > 0:  r += g;  if r >= t: send +t, r -= t
//                                    elif r <= -t: send -t, r += t
//                                    else: send 0
//   1bit, threshold t:      r += g;  if r > t: send +1, r -= 1
//                                    else: send -1, r += 1
//
// The receiver decodes the codes back to float32 and sums them like any push. Init and Pull are
// never compressed.
//
// Wire layout (MXNet's): a sequence of 32-bit words, each holding 16 values (2bit) or 32 values
// (1bit); a value's code lives in byte (i % 16) / 4 (2bit) or (i % 32) / 8 (1bit) of its word,
// in memory order, and within the byte the first value takes the most significant bits. 2-bit
// codes: 11 = +t, 10 = -t, 00 = 0 (01 also decodes to 0). 1-bit: 1 = +1, 0 = -1. The last word
// of a value is padded with zero bits. CompressedBytes gives the size for n values: 4 * ceil(n /
// 16) or 4 * ceil(n / 32) - 1/16 and 1/32 of float32 for n a multiple of the word.
//
// The kernels are written as branch-free loops over one word's values at a time, which the
// compiler vectorises (-O3); `//tests/bench:compressbench` prints their speed next to memcpy.
#ifndef KVSTORE_COMMON_COMPRESSION_H_
#define KVSTORE_COMMON_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstore {

// CompressionType: the numbering matches proto/kvstore.proto's Compression.
enum class CompressionType : uint8_t { kNone = 0, k2Bit = 1, k1Bit = 2 };

// CompressionParams: what SetGradientCompression selected.
struct CompressionParams {
  CompressionType type = CompressionType::kNone;
  float threshold = 0.5f;

  bool enabled() const { return type != CompressionType::kNone; }
  // ToString returns e.g. "2bit threshold=0.5" or "none".
  std::string ToString() const;
  friend bool operator==(const CompressionParams& a, const CompressionParams& b) {
    return a.type == b.type && (a.type == CompressionType::kNone || a.threshold == b.threshold);
  }
  friend bool operator!=(const CompressionParams& a, const CompressionParams& b) {
    return !(a == b);
  }
};

// The default threshold, MXNet's, for both types.
inline constexpr float kDefaultThreshold = 0.5f;

// MakeCompressionParams validates MXNet-style parameters: `type` is "2bit", "1bit" or "none"
// (compression off); `threshold` (0.5 when absent) must be finite, and positive for 2bit.
// InvalidArgument naming the bad field otherwise.
absl::StatusOr<CompressionParams> MakeCompressionParams(absl::string_view type,
                                                        std::optional<double> threshold);

// CompressionFromInt validates a wire value; InvalidArgument naming it otherwise.
absl::StatusOr<CompressionType> CompressionFromInt(int value);

// CompressionName returns "none", "2bit" or "1bit".
absl::string_view CompressionName(CompressionType type);

// ValuesPerWord returns 16 (2bit), 32 (1bit) or 1 (none).
int ValuesPerWord(CompressionType type);

// CompressedBytes returns the encoded size of `n` float32 values (4 * n for kNone).
size_t CompressedBytes(CompressionType type, int64_t n);

// Quantize encodes grad[0, n) into `out` (CompressedBytes(type, n) bytes), updating
// residual[0, n) as described above. Requires an enabled type.
void Quantize(const CompressionParams& params, const float* grad, float* residual, int64_t n,
              uint8_t* out);

// Dequantize decodes `n` values from `in` into out[0, n); DequantizeAdd adds them to out[0, n).
void Dequantize(const CompressionParams& params, const uint8_t* in, int64_t n, float* out);
void DequantizeAdd(const CompressionParams& params, const uint8_t* in, int64_t n, float* out);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_COMPRESSION_H_
