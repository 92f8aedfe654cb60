// devcaps emu: what the source files of the extension share (the devices and the allocator).
//
// emu_runtime.cpp owns the device count, the current device, streams, events and the allocator
// (c10 headers only: it compiles quickly); emu.cpp the hooks, the ops and the CPU fallback;
// emu_autocast.cpp autocast; emu_c10d.cpp the collective backend and the Python module.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <memory>

namespace devcaps_emu {

constexpr auto kEmu = c10::DeviceType::PrivateUse1;
// torch's DeviceIndex is an int8; pytest_devcaps/emu/__init__.py MAX_DEVICES says the same.
constexpr int kMaxDevices = 64;

c10::DeviceIndex count();
void set_count(int n);
// The current device of this thread (as for CUDA, the current device is per thread).
c10::DeviceIndex current();
// Make `index` current and return the previous one; a negative index changes nothing
// (torch.accelerator._get_device_index(None) gives -1).
c10::DeviceIndex exchange(c10::DeviceIndex index);
void check_index(c10::DeviceIndex index);

// The emu allocator (host memory with statistics), for the ops that create tensors.
c10::Allocator* allocator();

// Work on a device that is still running when its call returned: the collectives, which run on
// gloo's threads (emu_c10d.cpp). The device's synchronize waits for it, as a CUDA device's
// synchronize waits for NCCL's kernels; streams and events need not (a Work's wait blocks the
// host, which orders everything after it).
struct Pending {
  virtual ~Pending() = default;
  virtual bool finished() = 0;
  virtual void wait() = 0;  // rethrows the work's error
};
void add_pending(c10::DeviceIndex device, std::shared_ptr<Pending> work);
void wait_pending(c10::DeviceIndex device);

}  // namespace devcaps_emu
