#include "region_args.h"

#include "js_int.h"

namespace mstar {

RegionArgs::RegionArgs(Napi::Env env, const Napi::Value& list, const char* op, std::vector<std::string> keys)
    : env_(env), op_(op), keys_(std::move(keys)) {
  if (!list.IsArray()) throw Napi::TypeError::New(env, op_ + ": regions must be an array");
  Napi::Array a = list.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value v = a.Get(i);
    if (!v.IsObject()) {
      std::string shape;
      for (const std::string& k : keys_) shape += (shape.empty() ? "" : ", ") + k;
      fail(i, "must be an object {" + shape + "}");
    }
    Napi::Object o = v.As<Napi::Object>();
    std::vector<Napi::Value> values;
    for (const std::string& k : keys_) values.push_back(o.Get(k));
    values_.push_back(std::move(values));
  }
}

void RegionArgs::fail(size_t i, const std::string& msg) const {
  throw Napi::Error::New(env_, op_ + ": region " + std::to_string(i) + ": " + msg);
}

Tensor* RegionArgs::tensor(size_t i, size_t key) const {
  const Napi::Value& t = get(i, key);
  if (t.IsUndefined() || t.IsNull()) fail(i, keys_[key] + " is missing");
  if (!Tensor::Is(t)) fail(i, keys_[key] + " must be a Tensor");
  Tensor* x = Tensor::Unwrap(t.As<Napi::Object>());
  if (x->disposed()) fail(i, keys_[key] + " is a disposed Tensor");
  return x;
}

int64_t RegionArgs::offset(size_t i, size_t key, int64_t fallback) const {
  const Napi::Value& n = get(i, key);
  if (n.IsUndefined()) return fallback;
  const int64_t d = safeInteger(n, op_ + ": region " + std::to_string(i) + ": " + keys_[key]);
  if (d < 0) fail(i, keys_[key] + " must be an integer >= 0");
  return d;
}

}  // namespace mstar
