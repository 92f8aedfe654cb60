// devcaps emu: an emulated PrivateUse1 device for pytest-devcaps' own CI.
//
// Tensors live in host memory; "devices" are indices into one address space, so every op can
// run on the CPU. What a real out-of-tree backend registers, these files register too, in the
// way PyTorch's reference backend OpenReg does (pytorch/pytorch,
// test/cpp_extensions/open_registration_extension/torch_openreg/csrc: runtime/OpenRegGuard.h,
// runtime/OpenRegHooks.h, runtime/OpenRegDeviceAllocator.cpp, aten/OpenRegMinimal.cpp,
// aten/native/Minimal.cpp), written small:
//   1. an allocator with statistics (REGISTER_ALLOCATOR of a c10::DeviceAllocator), in
//      emu_runtime.cpp;
//   2. a device guard (C10_REGISTER_GUARD_IMPL): device count, current device, streams and
//      events, in emu_runtime.cpp;
//   3. PrivateUse1 hooks (at::RegisterPrivateUse1HooksInterface), so torch.accelerator answers;
//   4. the ops that create, view, resize and copy tensors, which must know the device, and
//      convolution (which the CPU fallback cannot reach);
//   5. a boxed fallback to the CPU kernels (at::native::cpu_fallback) for every other op;
//   6. autocast, in emu_autocast.cpp;
//   7. a torch.distributed backend, in emu_c10d.cpp.
// The Python side (pytest_devcaps/emu/autoload.py) loads this library with ctypes, sets the
// device count once through devcaps_emu_set_device_count, then renames PrivateUse1 to "emu".

#include "emu_device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace devcaps_emu {

using c10::Device;
using c10::DeviceIndex;

// ---- 3. hooks: what torch.accelerator and at::globalContext() ask of PrivateUse1 ------------
// Not overridden (torch then raises "You should register PrivateUse1HooksInterface ... and
// implement X"): generators (random ops on emu run on the CPU's default generator through the
// fallback), pinned host memory, getDeviceFromPtr.
// resizePrivateUse1Bytes is what Storage.resize_ calls (FSDP frees an unsharded parameter with
// storage.resize_(0)): the CPU's byte resize, through the storage's own allocator (ours), with
// the storage's device current so the new block is counted on it.
struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return count() > 0; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return count(); }
  void setCurrentDevice(DeviceIndex d) const override { exchange(d); }
  DeviceIndex getCurrentDevice() const override { return current(); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override { return exchange(d); }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override {
    return d >= 0 && d < count() ? exchange(d) : current();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    const c10::DeviceGuard guard(storage.device());
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};
const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new EmuHooks());  // torch keeps it for the process
  return true;
}();

// ---- 4. ops that must know the device -----------------------------------------------------
constexpr c10::DispatchKeySet kEmuKeys(c10::DispatchKey::PrivateUse1);

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "emu: only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "emu: pin_memory is for cpu tensors");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));  // allocate on that device
  return at::detail::empty_generic(size, allocator(), kEmuKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<Device> device, std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, allocator(), kEmuKeys,
                                           c10::dtype_or_default(dtype));
}

// A view of an emu tensor's memory as a cpu tensor (the memory is host memory).
at::Tensor as_cpu(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// cpu -> emu, emu -> cpu and emu -> emu: all are host copies.
at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor to = dst.is_cpu() ? dst : as_cpu(dst);
  at::native::copy_(to, self.is_cpu() ? self : as_cpu(self), non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return devcaps_emu::_copy_from(self, dst, false);  // not at::_copy_from (found by ADL)
}

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(as_cpu(self));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  // The cpu resize grows the storage through its own allocator: ours.
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      offset ? std::optional<int64_t>(offset->expect_int()) : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, int64_t offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset, size, stride);
}

// May `self.data = from` swap in `from`'s data? TensorImpl::has_compatible_shallow_copy_type
// says yes for two dense tensors of the in-tree backends (CPU, CUDA, XPU...) and, for any other
// backend, only for equal dispatch key sets; PrivateUse1 is not on its list. So, unanswered, a
// CPU module moved to emu gets new Parameter objects (torch.nn.Module._apply) and loses its
// weight tying, and FSDP's `param.data = param.to(device)` raises. emu memory is host memory:
// a dense emu tensor and a dense CPU or emu tensor swap data exactly as CPU and CUDA tensors do.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](c10::DispatchKeySet keys) {
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
           keys.has_any(c10::DispatchKeySet(
               {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit}));
  };
  if (dense(self.key_set()) && dense(from.key_set())) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// Convolution: at::convolution sends a backend it has no kernel of its own for (PrivateUse1 among
// them) to convolution_overrideable, whose only CPU kernel raises "not implemented", so the
// fallback cannot serve it (aten/src/ATen/native/Convolution.cpp select_conv_backend:
// ConvBackend::Overrideable). These run the CPU's convolution on CPU views of the host memory
// and copy the results to the input's device, as every real backend computes one of its own.
at::Tensor on_device(const at::Tensor& cpu, const at::Tensor& like) {
  return cpu.defined() ? cpu.to(like.device()) : cpu;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value() && bias->defined()) cpu_bias = as_cpu(*bias);
  return on_device(at::convolution(as_cpu(input), as_cpu(weight), cpu_bias, stride, padding,
                                   dilation, transposed, output_padding, groups),
                   input);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const std::vector<int64_t> bias_sizes{grad_output.size(1)};  // one bias per output channel
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      as_cpu(grad_output), as_cpu(input), as_cpu(weight), c10::IntArrayRef(bias_sizes), stride,
      padding, dilation, transposed, output_padding, groups, output_mask);
  return {on_device(grad_input, input), on_device(grad_weight, input), on_device(grad_bias, input)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", _copy_from);
  m.impl("_copy_from_and_resize", _copy_from_and_resize);
  m.impl("_local_scalar_dense", _local_scalar_dense);
  m.impl("resize_", resize_);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", _reshape_alias);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
}

// ---- 5. everything else: run the cpu kernel on cpu copies, copy results back ----------------
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace devcaps_emu

// ---- the loader's entry points (plain C, called through ctypes) -----------------------------
extern "C" {
void devcaps_emu_set_device_count(int n) { devcaps_emu::set_count(n); }
int devcaps_emu_device_count() { return devcaps_emu::count(); }
int devcaps_emu_current_device() { return devcaps_emu::current(); }
// 0 on success, -1 for an index out of range (the Python side raises with the message).
int devcaps_emu_set_device(int index) {
  if (index < 0 || index >= devcaps_emu::count()) return -1;
  devcaps_emu::exchange(static_cast<c10::DeviceIndex>(index));
  return 0;
}
}
