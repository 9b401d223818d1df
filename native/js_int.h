// Integer arguments from JS (sizes, offsets, counts), checked before any arithmetic: a
// number a double holds exactly, so that sums and products of them cannot wrap int64
// (1e19 passed as an offset was clamped to INT64_MAX, and start + length wrapped negative
// past the bounds checks).
#pragma once
#include <napi.h>

#include <cmath>
#include <string>

namespace mstar {

constexpr double kMaxSafeInteger = 9007199254740991.0;  // 2^53 - 1, Number.MAX_SAFE_INTEGER

// `what` names the call and the argument ("narrow: start").
inline int64_t safeInteger(const Napi::Value& v, const std::string& what) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), what + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::trunc(d) || std::fabs(d) > kMaxSafeInteger)
    throw Napi::RangeError::New(v.Env(), what + " must be an integer of at most 2^53 - 1, got " + std::to_string(d));
  return int64_t(d);
}

}  // namespace mstar
