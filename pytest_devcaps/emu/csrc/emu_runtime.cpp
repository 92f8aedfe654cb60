// devcaps emu: the device runtime: devices, streams, events and the allocator with statistics.
//
// PyTorch's OpenReg registers the same three things for its PrivateUse1 device (pytorch/pytorch,
// test/cpp_extensions/open_registration_extension/torch_openreg/csrc/runtime: OpenRegGuard.h,
// OpenRegStream.cpp, OpenRegEvent.h, OpenRegDeviceAllocator.cpp); this is our own, smaller:
//
// * emu is a synchronous device: every op has finished when it returns. A stream is then an id
//   (work on it is done at once, so every stream is always idle and ordering holds trivially),
//   and an event is the host clock at record time. That is a correct implementation of the
//   stream and event contract (c10/core/impl/DeviceGuardImplInterface.h), not a stub: waits
//   return at once because there is never anything to wait for; elapsed_time is the wall time
//   of the work recorded between two events. Collectives are the exception (emu_c10d.cpp): they
//   run on gloo's threads, and their Work objects, not streams, say when they are done.
// * The allocator hands out host memory and counts what it hands out, per device, in the
//   structure torch.accelerator.memory reads (c10::CachingDeviceAllocator::DeviceStats). It does
//   not cache: every allocation is its own segment, freed when its storage dies, so reserved
//   equals allocated and empty_cache has nothing to release. The numbers are true.

#include "emu_device.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include <mutex>
#include <unordered_map>

namespace devcaps_emu {

using c10::Device;
using c10::DeviceIndex;

// ---- devices ------------------------------------------------------------------------------
// The count is set once by the Python loader (it reads PYTEST_DEVCAPS_EMU_DEVICES and
// EMU_VISIBLE_DEVICES).
std::atomic<int> g_device_count{0};
thread_local DeviceIndex t_current = 0;

DeviceIndex count() { return static_cast<DeviceIndex>(g_device_count.load()); }
void set_count(int n) { g_device_count.store(n); }
DeviceIndex current() { return t_current; }

void check_index(DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < count(), "emu: device index ", static_cast<int>(index),
              " is out of range: this process has ", static_cast<int>(count()),
              " emu device(s) (PYTEST_DEVCAPS_EMU_DEVICES / EMU_VISIBLE_DEVICES)");
}

DeviceIndex exchange(DeviceIndex index) {
  DeviceIndex previous = t_current;
  if (index >= 0) {
    check_index(index);
    t_current = index;
  }
  return previous;
}

DeviceIndex resolve(DeviceIndex index) { return index < 0 ? t_current : index; }

// ---- outstanding work ------------------------------------------------------------------------
std::mutex g_pending_mutex;
std::array<std::vector<std::shared_ptr<Pending>>, kMaxDevices> g_pending;

void add_pending(DeviceIndex device, std::shared_ptr<Pending> work) {
  check_index(device);
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  auto& list = g_pending[device];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const std::shared_ptr<Pending>& p) { return p->finished(); }),
             list.end());
  list.push_back(std::move(work));
}

void wait_pending(DeviceIndex device) {
  check_index(device);
  std::vector<std::shared_ptr<Pending>> waiting;
  {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    waiting.swap(g_pending[device]);
  }
  for (auto& work : waiting) work->wait();  // outside the lock: a collective may add more
}

// ---- streams --------------------------------------------------------------------------------
// Id 0 is each device's default stream. As on CUDA, a pool of 32 streams per priority serves
// getStreamFromGlobalPool round-robin (ids 1-32 low priority, 33-64 high); getNewStream hands
// out fresh ids from 65. The current stream is per thread and per device.
constexpr c10::StreamId kPoolSize = 32;
std::atomic<c10::StreamId> g_pool_next[2] = {0, 0};
std::atomic<c10::StreamId> g_next_stream{2 * kPoolSize + 1};
thread_local std::array<c10::StreamId, kMaxDevices> t_streams{};

c10::Stream make_stream(DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, Device(kEmu, index), id);
}

// ---- events ---------------------------------------------------------------------------------
// torch.Event(enable_timing=True) passes EventFlag::BACKEND_DEFAULT, enable_timing=False
// PYTORCH_DEFAULT (torch/csrc/Event.cpp); as on CUDA, only timing events have elapsed_time.
using Clock = std::chrono::steady_clock;

struct EmuEvent {
  Clock::time_point recorded_at{};
  bool timing = false;
};

struct EmuGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kEmu; }
  Device exchangeDevice(Device d) const override { return Device(kEmu, exchange(d.index())); }
  Device getDevice() const override { return Device(kEmu, t_current); }
  void setDevice(Device d) const override { exchange(d.index()); }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < count()) t_current = d.index();
  }
  DeviceIndex deviceCount() const noexcept override { return count(); }

  c10::Stream getStream(Device d) const override {
    DeviceIndex index = resolve(d.index());
    check_index(index);
    return make_stream(index, t_streams[index]);
  }
  c10::Stream getDefaultStream(Device d) const override {
    DeviceIndex index = resolve(d.index());
    check_index(index);
    return make_stream(index, 0);
  }
  c10::Stream getStreamFromGlobalPool(Device d, bool high_priority) const override {
    DeviceIndex index = resolve(d.index());
    check_index(index);
    c10::StreamId slot = g_pool_next[high_priority ? 1 : 0]++ % kPoolSize;
    return make_stream(index, 1 + slot + (high_priority ? kPoolSize : 0));
  }
  c10::Stream getNewStream(Device d, int /*priority: every emu stream runs at once*/) const override {
    DeviceIndex index = resolve(d.index());
    check_index(index);
    return make_stream(index, g_next_stream++);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    DeviceIndex index = s.device_index();
    check_index(index);
    c10::StreamId previous = t_streams[index];
    t_streams[index] = s.id();
    return make_stream(index, previous);
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const DeviceIndex index) const override { wait_pending(resolve(index)); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}

  void record(void** event, const c10::Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "emu: event of device ", static_cast<int>(device_index),
                " recorded on a stream of device ", static_cast<int>(stream.device_index()));
    auto* recorded = static_cast<EmuEvent*>(*event);
    if (recorded == nullptr) {
      recorded = new EmuEvent();
      recorded->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = recorded;
    }
    recorded->recorded_at = Clock::now();
  }
  void block(void*, const c10::Stream&) const override {}  // what was recorded is done
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    delete static_cast<EmuEvent*>(event);
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end, "emu: both events must be recorded before elapsed_time");
    auto* first = static_cast<EmuEvent*>(start);
    auto* last = static_cast<EmuEvent*>(end);
    TORCH_CHECK(first->timing && last->timing,
                "emu: both events must be created with enable_timing=True to measure time "
                "(as on CUDA)");
    auto delta = last->recorded_at - first->recorded_at;
    return std::chrono::duration<double, std::milli>(delta).count();
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuard);

// ---- the allocator --------------------------------------------------------------------------
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

// CUDA's caching allocator puts blocks of at most 1 MiB in its small pool
// (c10/cuda/CUDACachingAllocator.cpp kSmallSize); the statistics split the same way.
constexpr size_t kSmallSize = 1 << 20;

struct Block {
  size_t size;
  DeviceIndex device;
};

class EmuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    DeviceIndex device = t_current;
    void* data = nullptr;
    if (nbytes > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      const size_t used = in_use(device);
      // A device holds at most its capacity, as a GPU does: past it, torch.OutOfMemoryError
      // (c10::OutOfMemoryError), not the host's memory taken until the kernel kills the process.
      TORCH_CHECK_WITH(OutOfMemoryError, capacity_ == 0 || nbytes <= capacity_ - std::min(used, capacity_),
                       "emu: out of memory: tried to allocate ", nbytes, " bytes on emu:",
                       static_cast<int>(device), ", which holds ", used, " of its ", capacity_,
                       " bytes (PYTEST_DEVCAPS_EMU_MEMORY sets each emu device's memory)");
      data = c10::alloc_cpu(nbytes);
      blocks_[data] = Block{nbytes, device};
      account(device, nbytes, +1);
    }
    return {data, data, &release, Device(kEmu, device)};
  }
  // Each device's memory in bytes (0: unbounded); set once, when the backend loads.
  void set_capacity(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = bytes;
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t n) const override {
    std::memcpy(dest, src, n);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // work is done at once

  DeviceStats getDeviceStats(DeviceIndex device) override {
    check_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[device];
  }
  void resetAccumulatedStats(DeviceIndex device) override {
    check_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& stats = stats_[device];
    for (auto* array : arrays(stats)) {
      for (Stat& stat : *array) stat.reset_accumulated();
    }
    stats.num_device_alloc = 0;
    stats.num_device_free = 0;
  }
  void resetPeakStats(DeviceIndex device) override {
    check_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* array : arrays(stats_[device])) {
      for (Stat& stat : *array) stat.reset_peak();
    }
  }
  // total is the device's capacity; free is what it has left, and never more than the host can
  // still hand out without swapping (MemAvailable): every emu device lives in host memory.
  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex device) override {
    device = resolve(device);
    check_index(device);
    size_t total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) *
                   static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t used = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capacity_ != 0) total = capacity_;
      used = in_use(device);
    }
    const size_t left = total - std::min(used, total);
    return {std::min(left, available_bytes()), total};
  }

  void free_block(void* data) {
    if (data == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = blocks_.find(data);
      TORCH_INTERNAL_ASSERT(found != blocks_.end(), "emu: freeing memory it did not allocate");
      account(found->second.device, found->second.size, -1);
      blocks_.erase(found);
    }
    c10::free_cpu(data);
  }

 private:
  static void release(void* data);

  static std::array<c10::CachingAllocator::StatArray*, 5> arrays(DeviceStats& stats) {
    return {&stats.allocation, &stats.segment, &stats.active, &stats.allocated_bytes,
            &stats.reserved_bytes};
  }

  // One allocation is one segment, active and allocated at once; bytes asked = bytes held.
  void account(DeviceIndex device, size_t nbytes, int sign) {
    DeviceStats& stats = stats_[device];
    const auto pool = static_cast<size_t>(nbytes <= kSmallSize ? StatType::SMALL_POOL
                                                                : StatType::LARGE_POOL);
    const auto all = static_cast<size_t>(StatType::AGGREGATE);
    for (size_t type : {all, pool}) {
      for (auto* counter : {&stats.allocation[type], &stats.segment[type], &stats.active[type]}) {
        sign > 0 ? counter->increase(1) : counter->decrease(1);
      }
      for (auto* bytes : {&stats.allocated_bytes[type], &stats.reserved_bytes[type],
                          &stats.active_bytes[type], &stats.requested_bytes[type]}) {
        sign > 0 ? bytes->increase(nbytes) : bytes->decrease(nbytes);
      }
    }
    (sign > 0 ? stats.num_device_alloc : stats.num_device_free) += 1;
  }

  size_t in_use(DeviceIndex device) {  // the caller holds mutex_
    const auto all = static_cast<size_t>(StatType::AGGREGATE);
    return static_cast<size_t>(std::max<int64_t>(stats_[device].allocated_bytes[all].current, 0));
  }

  static size_t available_bytes() {
    // MemAvailable of /proc/meminfo (kB), else the free pages.
    if (FILE* meminfo = std::fopen("/proc/meminfo", "r")) {
      char line[256];
      unsigned long long kib = 0;
      while (std::fgets(line, sizeof line, meminfo)) {
        if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
      }
      std::fclose(meminfo);
      if (kib > 0) return static_cast<size_t>(kib) * 1024;
    }
    return static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) *
           static_cast<size_t>(sysconf(_SC_PAGESIZE));
  }

  std::mutex mutex_;
  size_t capacity_ = 0;
  std::unordered_map<void*, Block> blocks_;
  std::array<DeviceStats, kMaxDevices> stats_{};
};

// Never destroyed: a storage may die after static destructors have run (at interpreter exit).
EmuAllocator* const g_allocator = new EmuAllocator();
void EmuAllocator::release(void* data) { g_allocator->free_block(data); }
REGISTER_ALLOCATOR(kEmu, g_allocator);

c10::Allocator* allocator() { return g_allocator; }

}  // namespace devcaps_emu

// ---- the loader's entry points for streams and statistics (plain C, called through ctypes) --
namespace {

using devcaps_emu::DeviceStats;

struct StatEntry {
  std::string name;
  std::function<int64_t(const DeviceStats&)> value;
};

// The statistics under the names torch.accelerator.memory.memory_stats gives them (it flattens
// torch._C._accelerator_getDeviceStats: "allocated_bytes.all.current", ..., "num_device_free").
const std::vector<StatEntry>& stat_table() {
  static const std::vector<StatEntry> table = [] {
    using Array = c10::CachingAllocator::StatArray DeviceStats::*;
    using Scalar = int64_t DeviceStats::*;
    using Single = c10::CachingAllocator::Stat DeviceStats::*;
    const std::pair<const char*, Array> arrays[] = {
        {"allocation", &DeviceStats::allocation},
        {"segment", &DeviceStats::segment},
        {"active", &DeviceStats::active},
        {"inactive_split", &DeviceStats::inactive_split},
        {"allocated_bytes", &DeviceStats::allocated_bytes},
        {"reserved_bytes", &DeviceStats::reserved_bytes},
        {"active_bytes", &DeviceStats::active_bytes},
        {"inactive_split_bytes", &DeviceStats::inactive_split_bytes},
        {"requested_bytes", &DeviceStats::requested_bytes}};
    const std::pair<const char*, Single> singles[] = {
        {"oversize_allocations", &DeviceStats::oversize_allocations},
        {"oversize_segments", &DeviceStats::oversize_segments}};
    const std::pair<const char*, Scalar> scalars[] = {
        {"num_alloc_retries", &DeviceStats::num_alloc_retries},
        {"num_ooms", &DeviceStats::num_ooms},
        {"max_split_size", &DeviceStats::max_split_size},
        {"num_sync_all_streams", &DeviceStats::num_sync_all_streams},
        {"num_device_alloc", &DeviceStats::num_device_alloc},
        {"num_device_free", &DeviceStats::num_device_free}};
    const char* pools[] = {"all", "small_pool", "large_pool"};  // StatType's order
    using Field = int64_t c10::CachingAllocator::Stat::*;
    const std::pair<const char*, Field> fields[] = {
        {"current", &c10::CachingAllocator::Stat::current},
        {"peak", &c10::CachingAllocator::Stat::peak},
        {"allocated", &c10::CachingAllocator::Stat::allocated},
        {"freed", &c10::CachingAllocator::Stat::freed}};
    std::vector<StatEntry> entries;
    for (const auto& [array_name, array] : arrays) {
      for (size_t pool = 0; pool < 3; ++pool) {
        for (const auto& [field_name, field] : fields) {
          entries.push_back({std::string(array_name) + "." + pools[pool] + "." + field_name,
                             [array, pool, field](const DeviceStats& s) {
                               return (s.*array)[pool].*field;
                             }});
        }
      }
    }
    for (const auto& [single_name, single] : singles) {
      for (const auto& [field_name, field] : fields) {
        entries.push_back({std::string(single_name) + "." + field_name,
                           [single, field](const DeviceStats& s) { return (s.*single).*field; }});
      }
    }
    for (const auto& [scalar_name, scalar] : scalars) {
      entries.push_back({scalar_name, [scalar](const DeviceStats& s) { return s.*scalar; }});
    }
    return entries;
  }();
  return table;
}

bool valid(int device) { return device >= 0 && device < devcaps_emu::count(); }

thread_local std::string t_last_error;

}  // namespace

extern "C" {
// The message of the last call that returned -2 in this thread.
const char* devcaps_emu_last_error() { return t_last_error.c_str(); }
// 0; -1 for a device index out of range; -2 when an outstanding collective failed.
int devcaps_emu_synchronize(int device) {
  if (!valid(device)) return -1;
  try {
    devcaps_emu::wait_pending(static_cast<c10::DeviceIndex>(device));
  } catch (const std::exception& error) {
    t_last_error = error.what();
    return -2;
  }
  return 0;
}
// Each returns -1 for a device index out of range (the Python side raises with the message).
long long devcaps_emu_current_stream(int device) {
  return valid(device) ? devcaps_emu::t_streams[device] : -1;
}
long long devcaps_emu_exchange_stream(int device, long long id) {
  if (!valid(device)) return -1;
  long long previous = devcaps_emu::t_streams[device];
  devcaps_emu::t_streams[device] = id;
  return previous;
}
int devcaps_emu_memory_stat_count() { return static_cast<int>(stat_table().size()); }
const char* devcaps_emu_memory_stat_name(int i) {
  const auto& table = stat_table();
  return i >= 0 && i < static_cast<int>(table.size()) ? table[i].name.c_str() : nullptr;
}
int devcaps_emu_memory_stats(int device, long long* values, int capacity) {
  const auto& table = stat_table();
  if (!valid(device) || capacity < static_cast<int>(table.size())) return -1;
  DeviceStats stats = devcaps_emu::g_allocator->getDeviceStats(device);
  for (size_t i = 0; i < table.size(); ++i) values[i] = table[i].value(stats);
  return static_cast<int>(table.size());
}
int devcaps_emu_reset_peak_memory_stats(int device) {
  if (!valid(device)) return -1;
  devcaps_emu::g_allocator->resetPeakStats(device);
  return 0;
}
int devcaps_emu_reset_accumulated_memory_stats(int device) {
  if (!valid(device)) return -1;
  devcaps_emu::g_allocator->resetAccumulatedStats(device);
  return 0;
}
void devcaps_emu_set_device_memory(unsigned long long bytes) {
  devcaps_emu::g_allocator->set_capacity(static_cast<size_t>(bytes));
}

int devcaps_emu_memory_info(int device, unsigned long long* free_bytes,
                            unsigned long long* total_bytes) {
  if (!valid(device)) return -1;
  auto [free, total] = devcaps_emu::g_allocator->getMemoryInfo(device);
  *free_bytes = free;
  *total_bytes = total;
  return 0;
}
}
