// The JS handle of a tensor: dtype, shape, device, and a view into shared storage.
#pragma once
#include <napi.h>

#include <memory>
#include <string>
#include <vector>

#include "dtype.h"
#include "storage.h"

namespace mstar {

class Tensor : public Napi::ObjectWrap<Tensor> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object New(Napi::Env env, std::shared_ptr<Storage> storage, DType dtype,
                          std::vector<int64_t> shape, size_t byteOffset);
  // Unwraps a JS value into a live tensor; `what` names the argument in errors.
  static Tensor& From(const Napi::Value& v, const char* what);
  static bool Is(const Napi::Value& v);

  explicit Tensor(const Napi::CallbackInfo& info);

  bool disposed() const { return !storage_; }
  // Shared ownership of the memory, for work that outlives this call (async reads).
  std::shared_ptr<Storage> storage() const { return storage_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtypeSize(dtype_); }
  Device device() const { return storage_->device; }
  void* data() const { return static_cast<char*>(storage_->data) + offset_; }
  template <typename T> T* ptr() const { return static_cast<T*>(data()); }
  std::string describe() const;  // "bf16[64, 128]"

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  size_t offset_ = 0;

  Napi::Value GetDType(const Napi::CallbackInfo& info);
  Napi::Value GetShape(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetDisposed(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value View(const Napi::CallbackInfo& info);
  Napi::Value Narrow(const Napi::CallbackInfo& info);
  Napi::Value ToArray(const Napi::CallbackInfo& info);
  Napi::Value CopyFrom(const Napi::CallbackInfo& info);
  Napi::Value CopyFromAsync(const Napi::CallbackInfo& info);
  Napi::Value CopyToAsync(const Napi::CallbackInfo& info);
  Napi::Value To(const Napi::CallbackInfo& info);
  void requireLive(Napi::Env env) const;
};

// Creates tensors from JS: empty(dtype, shape, device?), zeros(dtype, shape, device?),
// fromArray(dtype, shape, typedArray, device?); device is 'cpu' (the default) or 'cuda'.
Napi::Value Empty(const Napi::CallbackInfo& info);
Napi::Value Zeros(const Napi::CallbackInfo& info);
Napi::Value FromArray(const Napi::CallbackInfo& info);
// pinnedEmpty(dtype, shape): a cpu tensor in page-locked memory where a CUDA device exists.
Napi::Value PinnedEmpty(const Napi::CallbackInfo& info);
std::vector<int64_t> parseShape(const Napi::Value& v, const char* what);
// 'cpu' | 'cuda'; undefined means cpu.
Device parseDevice(const Napi::Value& v, const char* what);

// Runs f, turning a C++ exception from below the binding (a CUDA error, a failed
// allocation) into a JS error that names the op: "<op>: <reason>".
template <typename F>
auto withErrors(Napi::Env env, const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string(op) + ": " + e.what());
  }
}

}  // namespace mstar
