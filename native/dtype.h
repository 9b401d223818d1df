// Element types the addon stores, and exact conversions between them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace mstar {

enum class DType { F32, BF16, F16, I32, I64 };

size_t dtypeSize(DType t);
const char* dtypeName(DType t);
// Parses 'f32' | 'bf16' | 'f16' | 'i32' | 'i64'; throws std::invalid_argument otherwise.
DType parseDType(const std::string& name);
inline bool isFloat(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

inline float bf16ToF32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16ToF32(uint16_t h);
uint16_t f32ToF16(float f);

// Converts n float elements from src (type s) to dst (type d); s and d are float dtypes.
void convertFloats(void* dst, DType d, const void* src, DType s, size_t n);

// Reads element i of a float tensor as f32.
inline float loadFloat(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return f16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
}

// Writes v, rounded to t, as element i of a float tensor.
inline void storeFloat(void* p, DType t, size_t i, float v) {
  if (t == DType::F32) static_cast<float*>(p)[i] = v;
  else static_cast<uint16_t*>(p)[i] = t == DType::BF16 ? f32ToBf16(v) : f32ToF16(v);
}

}  // namespace mstar
