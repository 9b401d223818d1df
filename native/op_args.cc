#include "op_args.h"

#include <sstream>

namespace mstar {

void OpArgs::fail(const std::string& msg) const { throw Napi::Error::New(info_.Env(), std::string(op_) + ": " + msg); }

Tensor& OpArgs::tensor(size_t i, const char* name) const {
  if (!Tensor::Is(info_[i])) fail(std::string(name) + " must be a Tensor");
  Tensor* t = Tensor::Unwrap(info_[i].As<Napi::Object>());
  if (t->disposed()) fail(std::string(name) + " is a disposed Tensor");
  seen_.emplace_back(t, name);
  return *t;
}

Tensor* OpArgs::optionalTensor(size_t i, const char* name) const {
  if (info_[i].IsNull() || info_[i].IsUndefined()) return nullptr;
  return &tensor(i, name);
}

double OpArgs::number(size_t i, const char* name) const {
  if (!info_[i].IsNumber()) fail(std::string(name) + " must be a number");
  return info_[i].As<Napi::Number>().DoubleValue();
}

int OpArgs::integer(size_t i, const char* name, int min) const {
  double v = number(i, name);
  if (v != double(int(v)) || v < min) fail(std::string(name) + " must be an integer >= " + std::to_string(min));
  return int(v);
}

cpu::SliceStarts OpArgs::sliceStarts(size_t i, const char* name, int64_t width) const {
  using cpu::SliceStarts;
  const std::string what(name);
  const Napi::Value v = info_[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    fail(what + " must be an Int32Array");
  const Napi::Int32Array starts = v.As<Napi::Int32Array>();
  const int64_t count = int64_t(starts.ElementLength()) - 1;
  if (count < 1 || count > SliceStarts::kMax)
    fail(what + " has " + std::to_string(count + 1) + " entries; it must have 2 to " +
         std::to_string(SliceStarts::kMax + 1) + " (slices + 1)");
  SliceStarts s;
  s.count = int(count);
  for (int64_t k = 0; k <= count; ++k) s.at[k] = starts[k];
  if (s.at[0] != 0 || s.at[count] != width) fail(what + " must run from 0 to " + std::to_string(width));
  for (int64_t k = 0; k < count; ++k)
    if (s.at[k] > s.at[k + 1]) fail(what + " must not decrease");
  return s;
}

void OpArgs::expectDType(const Tensor& t, DType d, const char* name) const {
  if (t.dtype() != d) fail(std::string(name) + " must be " + dtypeName(d) + ", got " + t.describe());
}

void OpArgs::expectFloat(const Tensor& t, const char* name) const {
  if (!isFloat(t.dtype())) fail(std::string(name) + " must be f32, bf16 or f16, got " + t.describe());
}

void OpArgs::expectRank(const Tensor& t, size_t rank, const char* name) const {
  if (t.rank() != rank) fail(std::string(name) + " must have " + std::to_string(rank) + " dims, got " + t.describe());
}

void OpArgs::expectShape(const Tensor& t, std::initializer_list<int64_t> shape, const char* name) const {
  bool ok = t.rank() == shape.size();
  size_t i = 0;
  for (int64_t d : shape) ok = ok && t.dim(i++) == d;
  if (ok) return;
  std::ostringstream s;
  s << name << " must be [";
  i = 0;
  for (int64_t d : shape) s << (i++ ? ", " : "") << d;
  s << "], got " << t.describe();
  fail(s.str());
}

static const char* deviceName(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

bool OpArgs::oneDevice() {
  if (seen_.empty()) return false;
  Device d = seen_[0].first->device();
  for (auto& [t, name] : seen_)
    if (t->device() != d)
      fail(std::string(name) + " is on " + deviceName(t->device()) + " but " + seen_[0].second + " is on " +
           deviceName(d) + " (all tensors of one call must be on one device)");
  cuda_ = d == Device::CUDA;
  return cuda_;
}

DType OpArgs::expectAct(const Tensor& t, const char* name) {
  if (!cuda_) {
    expectDType(t, DType::F32, name);
    return DType::F32;
  }
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16)
    fail(std::string(name) + " must be f32 or bf16 on cuda, got " + t.describe());
  if (!act_) {
    act_ = &t;
    actName_ = name;
  } else if (t.dtype() != act_->dtype()) {
    fail(std::string(name) + " is " + t.describe() + " but " + actName_ + " is " + act_->describe() +
         " (activations of one call share a dtype)");
  }
  return t.dtype();
}

}  // namespace mstar
