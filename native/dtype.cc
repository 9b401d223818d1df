#include "dtype.h"

#include <stdexcept>

namespace mstar {

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtypeName(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

DType parseDType(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "f16") return DType::F16;
  if (name == "i32") return DType::I32;
  if (name == "i64") return DType::I64;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected f32, bf16, f16, i32 or i64)");
}

float f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t absb = bits & 0x7fffffffu;
  if (absb > 0x7f800000u) return uint16_t(sign | 0x7e00);           // NaN
  if (absb >= 0x477ff000u) return uint16_t(sign | 0x7c00);          // overflow -> inf
  if (absb < 0x38800000u) {                                           // subnormal or zero
    if (absb < 0x33000000u) return uint16_t(sign);
    uint32_t exp = absb >> 23;
    uint32_t man = (absb & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = ((absb - 0x38000000u) >> 13);
  uint32_t rem = absb & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(sign | half);
}

void convertFloats(void* dst, DType d, const void* src, DType s, size_t n) {
  if (d == s) {
    std::memcpy(dst, src, n * dtypeSize(d));
    return;
  }
  if (d == DType::F32) {
    float* o = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) o[i] = loadFloat(src, s, i);
    return;
  }
  uint16_t* o = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i) {
    float v = loadFloat(src, s, i);
    o[i] = d == DType::BF16 ? f32ToBf16(v) : f32ToF16(v);
  }
}

}  // namespace mstar
