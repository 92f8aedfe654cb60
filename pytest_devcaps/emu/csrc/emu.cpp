// devcaps emu: an emulated PrivateUse1 device for pytest-devcaps' own CI.
//
// Tensors live in host memory; "devices" are indices into one address space, so every op can
// run on the CPU. What a real out-of-tree backend registers, this file registers too, in the
// way PyTorch's reference backend OpenReg does (pytorch/pytorch,
// test/cpp_extensions/open_registration_extension/torch_openreg/csrc: runtime/OpenRegGuard.h,
// runtime/OpenRegHooks.h, runtime/OpenRegDeviceAllocator.cpp, aten/OpenRegMinimal.cpp,
// aten/native/Minimal.cpp), written small:
//   1. an allocator (REGISTER_ALLOCATOR) handing out host memory tagged with the current device;
//   2. a device guard (C10_REGISTER_GUARD_IMPL): device count, current device, one stream per
//      device (work is synchronous), events that record the host clock;
//   3. PrivateUse1 hooks (at::RegisterPrivateUse1HooksInterface), so torch.accelerator answers;
//   4. the ops that create, view, resize and copy tensors, which must know the device;
//   5. a boxed fallback to the CPU kernels (at::native::cpu_fallback) for every other op;
//   6. autocast, in emu_autocast.cpp.
// The Python side (pytest_devcaps/emu/autoload.py) loads this library with ctypes, sets the
// device count once through devcaps_emu_set_device_count, then renames PrivateUse1 to "emu".

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstring>

namespace devcaps_emu {

using c10::Device;
using c10::DeviceIndex;
constexpr auto kEmu = c10::DeviceType::PrivateUse1;

// ---- devices ------------------------------------------------------------------------------
// The count is set once by the Python loader (it reads PYTEST_DEVCAPS_EMU_DEVICES and
// EMU_VISIBLE_DEVICES); the current device is per thread, as it is for CUDA.
std::atomic<int> g_device_count{0};
thread_local DeviceIndex t_current = 0;

DeviceIndex count() { return static_cast<DeviceIndex>(g_device_count.load()); }

void check_index(DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < count(), "emu: device index ", static_cast<int>(index),
              " is out of range: this process has ", static_cast<int>(count()),
              " emu device(s) (PYTEST_DEVCAPS_EMU_DEVICES / EMU_VISIBLE_DEVICES)");
}

DeviceIndex exchange(DeviceIndex index) {
  // A negative index means "no change" (torch.accelerator._get_device_index(None) gives -1).
  DeviceIndex previous = t_current;
  if (index >= 0) {
    check_index(index);
    t_current = index;
  }
  return previous;
}

// ---- 1. allocator: host memory, tagged with the current emu device --------------------------
struct EmuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &c10::free_cpu, Device(kEmu, t_current)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &c10::free_cpu; }
  void copy_data(void* dest, const void* src, std::size_t n) const override {
    std::memcpy(dest, src, n);
  }
};
EmuAllocator g_allocator;
REGISTER_ALLOCATOR(kEmu, &g_allocator);

// ---- 2. device guard ----------------------------------------------------------------------
// Every op finishes before it returns, so each device has one stream (the default one) that
// is always idle. torch.Stream(device="emu") asks for a new stream: not overridden, so torch
// says "Backend doesn't support create a new Stream" and the streams probe answers unsupported.
// An event is the host clock at record time: elapsed_time is the wall time of the work between.
using Clock = std::chrono::steady_clock;

struct EmuGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kEmu; }
  Device exchangeDevice(Device d) const override { return Device(kEmu, exchange(d.index())); }
  Device getDevice() const override { return Device(kEmu, t_current); }
  void setDevice(Device d) const override { exchange(d.index()); }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < count()) t_current = d.index();
  }
  c10::Stream getStream(Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, Device(kEmu, d.index()));
  }
  c10::Stream getDefaultStream(Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  DeviceIndex deviceCount() const noexcept override { return count(); }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}

  void record(void** event, const c10::Stream&, const DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new Clock::time_point();
    *static_cast<Clock::time_point*>(*event) = Clock::now();
  }
  void block(void*, const c10::Stream&) const override {}  // recorded work is already done
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    delete static_cast<Clock::time_point*>(event);
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end, "emu: both events must be recorded before elapsed_time");
    auto delta = *static_cast<Clock::time_point*>(end) - *static_cast<Clock::time_point*>(start);
    return std::chrono::duration<double, std::milli>(delta).count();
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuard);

// ---- 3. hooks: what torch.accelerator and at::globalContext() ask of PrivateUse1 ------------
// Not overridden (torch then raises "You should register PrivateUse1HooksInterface ... and
// implement X"): generators (random ops on emu run on the CPU's default generator through the
// fallback), pinned host memory, getDeviceFromPtr.
struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return count() > 0; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return count(); }
  void setCurrentDevice(DeviceIndex d) const override { exchange(d); }
  DeviceIndex getCurrentDevice() const override { return t_current; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override { return exchange(d); }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override {
    return d >= 0 && d < count() ? exchange(d) : t_current;
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
  return at::detail::empty_generic(size, &g_allocator, kEmuKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<Device> device, std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kEmuKeys,
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
  return _copy_from(self, dst, false);
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
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
void devcaps_emu_set_device_count(int n) { devcaps_emu::g_device_count.store(n); }
int devcaps_emu_device_count() { return devcaps_emu::g_device_count.load(); }
int devcaps_emu_current_device() { return devcaps_emu::t_current; }
// 0 on success, -1 for an index out of range (the Python side raises with the message).
int devcaps_emu_set_device(int index) {
  if (index < 0 || index >= devcaps_emu::g_device_count.load()) return -1;
  devcaps_emu::t_current = static_cast<c10::DeviceIndex>(index);
  return 0;
}
}
