// Argument reading and shape checks shared by the op bindings: every failure names the
// op and the argument, e.g. "linear: w is bf16[64, 32] but x has 48 columns".
#pragma once
#include <napi.h>

#include <string>

#include "cpu/ops.h"
#include "tensor.h"

namespace mstar {

class OpArgs {
 public:
  OpArgs(const Napi::CallbackInfo& info, const char* op) : info_(info), op_(op) {}

  Tensor& tensor(size_t i, const char* name) const;
  Tensor* optionalTensor(size_t i, const char* name) const;  // null or undefined -> nullptr
  double number(size_t i, const char* name) const;
  int integer(size_t i, const char* name, int min = 0) const;

  [[noreturn]] void fail(const std::string& msg) const;
  void expect(bool ok, const std::string& msg) const { if (!ok) fail(msg); }
  void expectDType(const Tensor& t, DType d, const char* name) const;
  void expectFloat(const Tensor& t, const char* name) const;
  void expectShape(const Tensor& t, std::initializer_list<int64_t> shape, const char* name) const;
  void expectRank(const Tensor& t, size_t rank, const char* name) const;
  // Every tensor of an op lives on one device; only the CPU backend exists in this build.
  void expectCpu(std::initializer_list<const Tensor*> ts) const;

  cpu::Weights weights(const Tensor& t) const { return {t.data(), t.dtype()}; }
  Napi::Env env() const { return info_.Env(); }

 private:
  const Napi::CallbackInfo& info_;
  const char* op_;
};

}  // namespace mstar
