// The profiler's device hooks: torch::profiler::impl::ProfilerStubs, registered for
// PrivateUse1. `torch.autograd.profiler.profile(use_device="openreg")` records an event on the
// current stream before and after each operator and asks for the time between them; without
// these stubs it reads uninitialised times. Events are the guard's (Guard.cpp), so this file
// only adapts one interface to another.

#include "OpenReg.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_observer.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <cstring>

namespace openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

rust::Slice<const uint8_t> bytes(const char* name) {
  return {reinterpret_cast<const uint8_t*>(name), name == nullptr ? 0 : std::strlen(name)};
}

// ANCHOR: stubs
struct OpenRegProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  // An event recorded on the current stream; the CPU time is read just before, as CUDA does.
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    const c10::Device current = guard.getDevice();
    if (device != nullptr) {
      *device = current.index();
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    void* raw = nullptr;
    guard.record(&raw, guard.getStream(current), current.index(), c10::EventFlag::BACKEND_DEFAULT);
    *event = std::shared_ptr<void>(raw, [index = current.index()](void* e) {
      c10::impl::VirtualGuardImpl(kOpenReg).destroyEvent(e, index);
    });
  }

  // Device time between two events, in microseconds (the guard's is in milliseconds). Waits
  // for both: the stream may still be running the operator.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    guard.synchronizeEvent(start->get());
    guard.synchronizeEvent(end->get());
    return static_cast<float>(guard.elapsedTime(start->get(), end->get(), -1) * 1000.0);
  }

  // Annotations go to the runtime's trace, as CUDA's go to NVTX.
  void mark(const char* name) const override { trace_mark(bytes(name)); }
  void rangePush(const char* name) const override { trace_range_push(bytes(name)); }
  void rangePop() const override { trace_range_pop(); }

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    for (c10::DeviceIndex i = 0; i < guard.deviceCount(); ++i) {
      const c10::DeviceGuard on(c10::Device(kOpenReg, i));
      op(i);
    }
  }

  void synchronize() const override {
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    for (c10::DeviceIndex i = 0; i < guard.deviceCount(); ++i) {
      guard.synchronizeDevice(i);
    }
  }
};
// ANCHOR_END: stubs

// ANCHOR: observer
// ProfilerState.PRIVATEUSE1 (torch.openreg.profiler.emit_ranges): no timing, every operator
// becomes a range in the runtime's trace, as emit_nvtx makes NVTX ranges for CUDA's tools.
struct RangeObserver final : torch::profiler::impl::ProfilerStateBase {
  using ProfilerStateBase::ProfilerStateBase;
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::PRIVATEUSE1;
  }
  void reportMemoryUsage(void*, int64_t, size_t, size_t, c10::Device) override {}
};

void push_range_callbacks(const torch::profiler::impl::ProfilerConfig& config,
                          const std::unordered_set<at::RecordScope>& scopes) {
  auto state = std::make_shared<RangeObserver>(config);
  RangeObserver* observer = state.get();
  torch::profiler::impl::ProfilerStateBase::push(std::move(state));
  // The profiler removes the callback through the handle when it is disabled.
  observer->setCallbackHandle(at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            trace_range_push(bytes(fn.name()));
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) { trace_range_pop(); })
          .scopes(scopes)));
}
// ANCHOR_END: observer

} // namespace

// ANCHOR: register_profiler
void register_profiler() {
  // The registry keeps the pointer: a static that lives as long as the process.
  static OpenRegProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  torch::profiler::impl::pushPRIVATEUSE1CallbacksStub.set_privateuse1_dispatch_ptr(
      &push_range_callbacks);
}
// ANCHOR_END: register_profiler

} // namespace openreg
