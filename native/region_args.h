// A list of regions from JS (upload's, scatterPlan's): objects whose fields name tensors and
// offsets. Every region's fields are read before any is checked, since reading one may run
// JS (a getter) that disposes a tensor already unwrapped; the checks then run no JS.
#pragma once
#include <napi.h>

#include <string>
#include <vector>

#include "tensor.h"

namespace mstar {

class RegionArgs {
 public:
  // list: the JS argument (an array of objects); op names the call in errors; keys: the
  // fields read from each region, addressed below by their index in keys.
  RegionArgs(Napi::Env env, const Napi::Value& list, const char* op, std::vector<std::string> keys);

  size_t size() const { return values_.size(); }
  const Napi::Value& get(size_t i, size_t key) const { return values_[i][key]; }
  // Throws "<op>: region <i>: <msg>".
  [[noreturn]] void fail(size_t i, const std::string& msg) const;
  // A live tensor (a missing one fails).
  Tensor* tensor(size_t i, size_t key) const;
  // An integer >= 0, or `fallback` where the field is undefined.
  int64_t offset(size_t i, size_t key, int64_t fallback = 0) const;

 private:
  Napi::Env env_;
  std::string op_;
  std::vector<std::string> keys_;
  std::vector<std::vector<Napi::Value>> values_;
};

}  // namespace mstar
