// Argument reading and shape checks shared by the op bindings: every failure names the
// op and the argument, e.g. "linear: w is bf16[64, 32] but x has 48 columns".
#pragma once
#include <napi.h>

#include <string>
#include <utility>
#include <vector>

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
  bool flag(size_t i) const { return info_.Length() > i && info_[i].ToBoolean(); }  // absent: false
  bool given(size_t i) const { return !info_[i].IsUndefined(); }  // past the last argument: not given
  bool isNumber(size_t i) const { return info_[i].IsNumber(); }
  // An Int32Array of slices + 1 starts, from 0 to width, none below the one before.
  cpu::SliceStarts sliceStarts(size_t i, const char* name, int64_t width) const;

  [[noreturn]] void fail(const std::string& msg) const;
  // msg: the message, or a callable that makes it. The checks run on every op call, and
  // formatting their messages up front cost the host about a microsecond an op.
  void expect(bool ok, const char* msg) const { if (!ok) fail(msg); }
  void expect(bool ok, const std::string& msg) const { if (!ok) fail(msg); }
  template <typename Make, typename = decltype(std::declval<Make&>()())>
  void expect(bool ok, Make&& make) const { if (!ok) fail(make()); }
  void expectDType(const Tensor& t, DType d, const char* name) const;
  void expectFloat(const Tensor& t, const char* name) const;
  void expectShape(const Tensor& t, std::initializer_list<int64_t> shape, const char* name) const;
  void expectRank(const Tensor& t, size_t rank, const char* name) const;
  // Every tensor of an op lives on one device: checks all tensors read so far and
  // returns true for cuda. Call it before the dtype checks, which depend on the device.
  bool oneDevice();
  // An activation operand: f32 on the CPU; f32 or bf16 on CUDA, the same for every
  // activation of the call. Returns its dtype.
  DType expectAct(const Tensor& t, const char* name);
  // Runs a backend kernel, turning a CUDA error into "<op>: <reason>".
  template <typename F>
  void run(F&& f) const {
    try {
      f();
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  cpu::Weights weights(const Tensor& t) const { return {t.data(), t.dtype()}; }
  Napi::Env env() const { return info_.Env(); }

 private:
  const Napi::CallbackInfo& info_;
  const char* op_;
  mutable std::vector<std::pair<const Tensor*, const char*>> seen_;  // for oneDevice()
  bool cuda_ = false;
  const Tensor* act_ = nullptr;  // the first activation operand
  const char* actName_ = nullptr;
};

}  // namespace mstar
