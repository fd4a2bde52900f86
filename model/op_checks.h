// The argument checks of Ops' front door and the scope that reports an op
// to the hook: private to model/ops.cpp and model/ops_fp8.cpp.
//
// Every op checks element types and that each buffer holds at least what the
// sizes in the call imply: a short buffer is a model bug that would otherwise
// be a silent overrun. Larger buffers are allowed so callers can reuse
// workspaces sized for the largest batch.
#pragma once

#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops.h"

namespace fsdp::op_checks {

inline void need(Tensor t, int64_t n, const char* what) {
  FSDP_CHECK(n >= 0 && t.numel >= n, what, " has ", t.numel, " elements, the op needs ", n);
}
inline void of(Tensor t, DType d, int64_t n, const char* what) {
  FSDP_CHECK(t.dtype == d, what, " is ", dtype_name(t.dtype), ", expected ", dtype_name(d));
  need(t, n, what);
}
inline void f32(Tensor t, int64_t n, const char* what) {
  of(t, DType::f32, n, what);
}
inline void i32(Tensor t, int64_t n, const char* what) {
  of(t, DType::i32, n, what);
}
// An optional f32 output (the amax arguments): checked when given.
inline void opt_f32(Tensor t, int64_t n, const char* what) {
  if (t.numel > 0) f32(t, n, what);
}
// An activation or a gathered weight: in the backend's compute dtype.
inline void act(const Ops& ops, Tensor t, int64_t n, const char* what) {
  FSDP_CHECK(t.dtype == ops.compute_dtype(), what, " is ", dtype_name(t.dtype), ", the ",
             ops.name(), " backend computes in ", dtype_name(ops.compute_dtype()));
  need(t, n, what);
}
// A weight gradient: f32, or the compute dtype (the engine's gathered
// low-precision gradient buffers).
inline void grad(const Ops& ops, Tensor t, int64_t n, const char* what) {
  FSDP_CHECK(t.dtype == DType::f32 || t.dtype == ops.compute_dtype(), what, " is ",
             dtype_name(t.dtype), ", expected f32 or ", dtype_name(ops.compute_dtype()));
  need(t, n, what);
}
// f32 or bf16: what casts, accumulation and the FP8 casts read and write.
inline bool floating(DType t) {
  return t == DType::f32 || t == DType::bf16;
}
inline void floating(Tensor t, const char* what) {
  FSDP_CHECK(floating(t.dtype), what, " is ", dtype_name(t.dtype), ", expected f32 or bf16");
}
// FP8 codes: u8 holding n, with their inverse scale f32[1].
inline void codes(const Fp8Tensor& t, int64_t n, const char* what) {
  of(t.codes, DType::u8, n, what);
  f32(t.scale_inv, 1, what);
}

// Whether the first na elements of a and the first nb of b share memory.
inline bool overlap(Tensor a, int64_t na, Tensor b, int64_t nb) {
  const auto* pa = static_cast<const char*>(a.data);
  const auto* pb = static_cast<const char*>(b.data);
  return na > 0 && nb > 0 && pa < pb + nb * int64_t(dtype_size(b.dtype)) &&
         pb < pa + na * int64_t(dtype_size(a.dtype));
}
inline bool overlap(Tensor a, Tensor b, int64_t n) {
  return overlap(a, n, b, n);
}

// "op d0xd1x...": the hook's key for an op and its shape.
inline std::string key(const char* op, std::initializer_list<int64_t> dims) {
  std::string s = op;
  char sep = ' ';
  for (int64_t d : dims) {
    s += sep + std::to_string(d);
    sep = 'x';
  }
  return s;
}
inline double esize(Tensor t) {
  return double(dtype_size(t.dtype));
}
// The call of an op over many tensors read once each ("amax_each 12x4096"):
// count and total elements, the bytes read.
inline OpCall each_call(const char* op, const std::vector<Tensor>& xs) {
  double bytes = 0;
  int64_t n = 0;
  for (Tensor x : xs) bytes += double(x.bytes()), n += x.numel;
  return OpCall{key(op, {int64_t(xs.size()), n}), 0, bytes};
}

// One op call between the hook's begin and end: made before the backend's
// do_ method runs, it ends with the front-door method. call(), the OpCall, is
// built only when a hook is set. An op that throws is not reported as ended
// (the run is stopping, and end() may need the device that failed); end()
// itself may throw, as a failed mark would from any other call.
class OpScope {
 public:
  template <class Call>
  OpScope(OpHook* hook, Call&& call) : hook_(hook) {
    if (!hook_) return;
    call_ = call();
    hook_->begin(call_);
  }
  ~OpScope() noexcept(false) {
    if (hook_ && std::uncaught_exceptions() == exceptions_) hook_->end(call_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpHook* hook_;
  OpCall call_;
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace fsdp::op_checks
