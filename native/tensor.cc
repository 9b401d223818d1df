#include "tensor.h"
#include "js_int.h"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "gpu.h"

namespace mstar {

Napi::Function Tensor::Init(Napi::Env env) {
  Napi::Function fn = DefineClass(env, "Tensor", {
    InstanceAccessor<&Tensor::GetDType>("dtype"),
    InstanceAccessor<&Tensor::GetShape>("shape"),
    InstanceAccessor<&Tensor::GetDevice>("device"),
    InstanceAccessor<&Tensor::GetDisposed>("disposed"),
    InstanceMethod<&Tensor::Dispose>("dispose"),
    InstanceMethod<&Tensor::View>("view"),
    InstanceMethod<&Tensor::Narrow>("narrow"),
    InstanceMethod<&Tensor::ToArray>("toArray"),
    InstanceMethod<&Tensor::CopyFrom>("copyFrom"),
    InstanceMethod<&Tensor::CopyFromAsync>("copyFromAsync"),
    InstanceMethod<&Tensor::CopyToAsync>("copyToAsync"),
    InstanceMethod<&Tensor::To>("to"),
  });
  // Each env (the main thread, every worker thread) gets its own constructor reference.
  env.SetInstanceData<Napi::FunctionReference>(new Napi::FunctionReference(Napi::Persistent(fn)));
  return fn;
}

Tensor::Tensor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Tensor>(info) {}

Napi::Object Tensor::New(Napi::Env env, std::shared_ptr<Storage> storage, DType dtype,
                         std::vector<int64_t> shape, size_t byteOffset) {
  Napi::Object obj = env.GetInstanceData<Napi::FunctionReference>()->New({});
  Tensor* t = Unwrap(obj);
  t->storage_ = std::move(storage);
  t->dtype_ = dtype;
  t->shape_ = std::move(shape);
  t->offset_ = byteOffset;
  return obj;
}

bool Tensor::Is(const Napi::Value& v) {
  if (!v.IsObject()) return false;
  Napi::Env env = v.Env();
  return v.As<Napi::Object>().InstanceOf(env.GetInstanceData<Napi::FunctionReference>()->Value());
}

Tensor& Tensor::From(const Napi::Value& v, const char* what) {
  if (!Is(v)) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a Tensor");
  Tensor* t = Unwrap(v.As<Napi::Object>());
  if (!t->storage_) throw Napi::Error::New(v.Env(), std::string(what) + " is a disposed Tensor");
  return *t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string Tensor::describe() const {
  std::ostringstream s;
  s << dtypeName(dtype_) << "[";
  for (size_t i = 0; i < shape_.size(); ++i) s << (i ? ", " : "") << shape_[i];
  s << "]";
  return s.str();
}

void Tensor::requireLive(Napi::Env env) const {
  if (!storage_) throw Napi::Error::New(env, "Tensor was disposed");
}

Napi::Value Tensor::GetDType(const Napi::CallbackInfo& info) {
  requireLive(info.Env());
  return Napi::String::New(info.Env(), dtypeName(dtype_));
}

Napi::Value Tensor::GetShape(const Napi::CallbackInfo& info) {
  requireLive(info.Env());
  Napi::Array a = Napi::Array::New(info.Env(), shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) a.Set(uint32_t(i), Napi::Number::New(info.Env(), double(shape_[i])));
  return a;
}

Napi::Value Tensor::GetDevice(const Napi::CallbackInfo& info) {
  requireLive(info.Env());
  return Napi::String::New(info.Env(), storage_->device == Device::CPU ? "cpu" : "cuda");
}

Napi::Value Tensor::GetDisposed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !storage_);
}

Napi::Value Tensor::Dispose(const Napi::CallbackInfo& info) {
  storage_.reset();  // the memory goes when the last view of it is disposed or collected
  return info.Env().Undefined();
}

std::vector<int64_t> parseShape(const Napi::Value& v, const char* what) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an array of sizes");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<int64_t> shape(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value d = a.Get(i);
    double x = d.IsNumber() ? d.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0) || x != double(int64_t(x)))
      throw Napi::TypeError::New(v.Env(), std::string(what) + "[" + std::to_string(i) + "] must be a non-negative integer");
    shape[i] = int64_t(x);
  }
  return shape;
}

static int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// view(shape): the same elements with another shape; one size may be -1 (inferred).
Napi::Value Tensor::View(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "view(shape): shape must be an array");
  Napi::Array a = info[0].As<Napi::Array>();
  std::vector<int64_t> shape(a.Length());
  int inferred = -1;
  int64_t known = 1;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    int64_t d = safeInteger(a.Get(i), "view: shape[" + std::to_string(i) + "]");
    if (d == -1 && inferred < 0) { inferred = int(i); continue; }
    if (d < 0) throw Napi::RangeError::New(env, "view(shape): sizes must be >= 0 (one may be -1)");
    shape[i] = d;
    if (__builtin_mul_overflow(known, d, &known))  // a wrapped product could pass the count check below
      throw Napi::RangeError::New(env, "view: " + describe() + " has " + std::to_string(numel()) +
                                           " elements, far fewer than the new shape's");
  }
  if (inferred >= 0) {
    if (known == 0 || numel() % known != 0)
      throw Napi::RangeError::New(env, "view: cannot infer a size to view " + describe() + " as the given shape");
    shape[inferred] = numel() / known;
  }
  if (product(shape) != numel())
    throw Napi::RangeError::New(env, "view: " + describe() + " has " + std::to_string(numel()) +
                                         " elements, the new shape has " + std::to_string(product(shape)));
  return New(env, storage_, dtype_, shape, offset_);
}

// narrow(start, length): rows [start, start + length) along dim 0, sharing storage.
Napi::Value Tensor::Narrow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  if (shape_.empty()) throw Napi::RangeError::New(env, "narrow: a 0-d tensor has no rows");
  int64_t start = safeInteger(info[0], "narrow: start");
  int64_t len = safeInteger(info[1], "narrow: length");
  if (start < 0 || len < 0 || start > shape_[0] || len > shape_[0] - start)
    throw Napi::RangeError::New(env, "narrow(" + std::to_string(start) + ", " + std::to_string(len) +
                                         ") is outside the " + std::to_string(shape_[0]) + " rows of " + describe());
  std::vector<int64_t> shape = shape_;
  shape[0] = len;
  size_t rowBytes = size_t(product(shape_) / std::max<int64_t>(shape_[0], 1)) * dtypeSize(dtype_);
  return New(env, storage_, dtype_, shape, offset_ + size_t(start) * rowBytes);
}

// toArray(): the elements as Float32Array (float dtypes, converted), Int32Array or BigInt64Array.
// A CUDA tensor is copied back first, which waits for the ops enqueued before.
Napi::Value Tensor::ToArray(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  size_t n = size_t(numel());
  bool cuda = device() == Device::CUDA;
  // Host bytes of the elements: the storage itself, or a copy of the device's.
  auto hostBytes = [&](void* into) -> const void* {
    if (!cuda) return data();
    withErrors(env, "toArray", [&] { gpu::copyToHost(into, data(), bytes()); });
    return into;
  };
  if (isFloat(dtype_)) {
    Napi::Float32Array out = Napi::Float32Array::New(env, n);
    if (dtype_ == DType::F32) {
      if (cuda) hostBytes(out.Data());
      else std::memcpy(out.Data(), data(), n * 4);
    } else {
      std::vector<char> staging(cuda ? bytes() : 0);
      convertFloats(out.Data(), DType::F32, hostBytes(staging.data()), dtype_, n);
    }
    return out;
  }
  if (dtype_ == DType::I32) {
    Napi::Int32Array out = Napi::Int32Array::New(env, n);
    if (cuda) hostBytes(out.Data());
    else std::memcpy(out.Data(), data(), n * 4);
    return out;
  }
  Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(env, n * 8);
  if (cuda) hostBytes(buf.Data());
  else std::memcpy(buf.Data(), data(), n * 8);
  return Napi::TypedArrayOf<int64_t>::New(env, n, buf, 0, napi_bigint64_array);
}

// A typed array's elements checked against `t`: Float32Array fits any float dtype (then
// `narrow` says the elements are f32 and must be converted), other arrays must hold
// exactly the tensor's element type.
struct Source {
  const char* data;
  bool narrow;
};

static Source sourceOf(Napi::Env env, const Tensor& t, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) throw Napi::TypeError::New(env, std::string(what) + " must be a typed array");
  Napi::TypedArray a = v.As<Napi::TypedArray>();
  size_t n = size_t(t.numel());
  if (a.ElementLength() != n)
    throw Napi::RangeError::New(env, std::string(what) + " has " + std::to_string(a.ElementLength()) +
                                         " elements but " + t.describe() + " needs " + std::to_string(n));
  const char* src = static_cast<const char*>(a.ArrayBuffer().Data()) + a.ByteOffset();
  napi_typedarray_type at = a.TypedArrayType();
  if (at == napi_float32_array && isFloat(t.dtype())) return {src, t.dtype() != DType::F32};
  bool ok = (at == napi_int32_array && t.dtype() == DType::I32) ||
            (at == napi_bigint64_array && t.dtype() == DType::I64) ||
            (at == napi_uint16_array && (t.dtype() == DType::BF16 || t.dtype() == DType::F16));
  if (!ok)
    throw Napi::TypeError::New(env, std::string(what) + ": this typed array cannot fill a " + dtypeName(t.dtype()) +
                                        " tensor (use Float32Array for floats, Int32Array for i32, BigInt64Array for i64)");
  return {src, false};
}

// Copies a typed array into `t` (see sourceOf); on CUDA it waits until the copy is done.
static void copyTypedArray(Napi::Env env, Tensor& t, const Napi::Value& v, const char* what) {
  Source s = sourceOf(env, t, v, what);
  size_t n = size_t(t.numel());
  if (t.device() == Device::CPU) {
    if (s.narrow) convertFloats(t.data(), t.dtype(), s.data, DType::F32, n);
    else std::memcpy(t.data(), s.data, t.bytes());
    return;
  }
  if (!s.narrow) {
    withErrors(env, what, [&] { gpu::copyToDevice(t.data(), s.data, t.bytes()); });
    return;
  }
  std::vector<char> staging(t.bytes());  // narrow on the host, then copy the narrow elements
  convertFloats(staging.data(), t.dtype(), s.data, DType::F32, n);
  withErrors(env, what, [&] { gpu::copyToDevice(t.data(), staging.data(), t.bytes()); });
}

Napi::Value Tensor::CopyFrom(const Napi::CallbackInfo& info) {
  requireLive(info.Env());
  copyTypedArray(info.Env(), *this, info[0], "copyFrom(array)");
  return info.This();
}

// copyFromAsync(array): as copyFrom, but on CUDA it returns at once: the elements go into
// the storage's pinned staging buffer and from there to the device in stream order, so
// ops enqueued later see them. The buffer is refilled only after its previous copy ran.
Napi::Value Tensor::CopyFromAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  const char* what = "copyFromAsync(array)";
  if (device() == Device::CPU) {
    copyTypedArray(env, *this, info[0], what);
    return info.This();
  }
  Source s = sourceOf(env, *this, info[0], what);
  withErrors(env, what, [&] {
    if (!storage_->staging) storage_->staging = std::make_unique<gpu::Staging>();
    void* host = storage_->staging->reserve(bytes());
    if (s.narrow) convertFloats(host, dtype_, s.data, DType::F32, size_t(numel()));
    else std::memcpy(host, s.data, bytes());
    storage_->staging->send(data(), bytes());
  });
  return info.This();
}

// copyToAsync(dst): this CUDA tensor's elements into dst, a pinned cpu tensor of the same
// dtype and size (pinnedEmpty), in stream order; returns at once. dst holds them once a
// fence recorded afterwards has passed.
Napi::Value Tensor::CopyToAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  const char* what = "copyToAsync(dst)";
  Tensor& dst = From(info[0], "copyToAsync: dst");
  if (device() != Device::CUDA) throw Napi::TypeError::New(env, std::string(what) + ": the tensor must be on cuda");
  if (dst.device() != Device::CPU || !dst.storage_->pinned)
    throw Napi::TypeError::New(env, std::string(what) + ": dst must be a pinned cpu tensor (pinnedEmpty)");
  if (dst.dtype_ != dtype_ || dst.numel() != numel())
    throw Napi::TypeError::New(env, std::string(what) + ": dst is " + dst.describe() + " but the tensor is " + describe());
  withErrors(env, what, [&] { gpu::copyToHostAsync(dst.data(), data(), bytes()); });
  return info.This();
}

// to(device): a copy of the elements on `device` (a new, contiguous storage).
Napi::Value Tensor::To(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireLive(env);
  Device to = parseDevice(info[0], "to(device)");
  Device from = device();
  return withErrors(env, "to", [&] {
    auto storage = std::make_shared<Storage>(to, bytes());
    if (from == Device::CPU && to == Device::CPU) std::memcpy(storage->data, data(), bytes());
    else if (from == Device::CPU) gpu::copyToDevice(storage->data, data(), bytes());
    else if (to == Device::CPU) gpu::copyToHost(storage->data, data(), bytes());
    else gpu::copyOnDevice(storage->data, data(), bytes());
    return New(env, storage, dtype_, shape_, 0);
  });
}

Device parseDevice(const Napi::Value& v, const char* what) {
  if (v.IsUndefined()) return Device::CPU;
  std::string name = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (name == "cpu") return Device::CPU;
  if (name == "cuda") return Device::CUDA;
  throw Napi::TypeError::New(v.Env(), std::string(what) + ": device must be 'cpu' or 'cuda'");
}

static Napi::Value make(const Napi::CallbackInfo& info, bool zero, size_t deviceArg, const char* op, bool pinned = false) {
  Napi::Env env = info.Env();
  DType dtype;
  try {
    dtype = parseDType(info[0].ToString().Utf8Value());
  } catch (const std::invalid_argument& e) {
    throw Napi::TypeError::New(env, e.what());
  }
  std::vector<int64_t> shape = parseShape(info[1], "shape");
  Device device = pinned ? Device::CPU : parseDevice(info[deviceArg], op);
  // Refuse sizes whose byte count would overflow instead of allocating a wrong-sized buffer.
  const int64_t limit = int64_t(1) << 48;
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d != 0 && elements > limit / d) throw Napi::RangeError::New(env, "shape is too large to allocate");
    elements *= d;
  }
  size_t bytes = size_t(elements) * dtypeSize(dtype);
  return withErrors(env, op, [&] {
    auto storage = std::make_shared<Storage>(device, bytes, pinned);
    if (zero && device == Device::CPU) std::memset(storage->data, 0, bytes);
    if (zero && device == Device::CUDA) gpu::memsetAsync(storage->data, 0, bytes);
    return Tensor::New(env, storage, dtype, shape, 0);
  });
}

Napi::Value Empty(const Napi::CallbackInfo& info) { return make(info, false, 2, "empty"); }
Napi::Value Zeros(const Napi::CallbackInfo& info) { return make(info, true, 2, "zeros"); }
Napi::Value PinnedEmpty(const Napi::CallbackInfo& info) { return make(info, false, 2, "pinnedEmpty", true); }

Napi::Value FromArray(const Napi::CallbackInfo& info) {
  Napi::Value obj = make(info, false, 3, "fromArray");
  copyTypedArray(info.Env(), Tensor::From(obj, "tensor"), info[2], "fromArray(dtype, shape, array)");
  return obj;
}

}  // namespace mstar
