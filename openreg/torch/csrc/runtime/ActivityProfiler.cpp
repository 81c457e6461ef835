// The Kineto path: a libkineto::IActivityProfiler for PrivateUse1. Inside
// torch.profiler.profile(activities=[CPU, PrivateUse1]), Kineto opens a session of ours: the
// runtime's trace records every kernel, copy and event record on every stream, tagged with
// the correlation id of the operator that launched it, and the session hands them to Kineto,
// linked to their operators, for the profiler's tables and the Chrome trace.

// Kineto's headers use fmt; the wheel ships fmt's headers but no fmt library.
#define FMT_HEADER_ONLY
#include "OpenReg.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <time.h>

namespace openreg {
namespace {

using libkineto::ActivityType;

// The runtime times with CLOCK_MONOTONIC; Kineto and PyTorch's profiler with Unix time.
int64_t unix_minus_monotonic_ns() {
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  return unix_ns - (int64_t{mono.tv_sec} * 1'000'000'000 + mono.tv_nsec);
}

ActivityType type_of(uint8_t kind) {
  switch (kind) {
    case 1:
      return ActivityType::GPU_MEMCPY;
    case 2:
      return ActivityType::GPU_USER_ANNOTATION;  // an event record: an instant on the stream
    default:
      return ActivityType::CONCURRENT_KERNEL;
  }
}

// ANCHOR: session
class OpenRegSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit OpenRegSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    offset_ns_ = unix_minus_monotonic_ns();
    trace_start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // Work launched inside the window may still be queued: let every stream finish first.
  // Kineto calls this from C++ that does not expect exceptions (a graph capture in progress
  // refuses the wait): the error is reported through errors() instead.
  void stop() override {
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    for (c10::DeviceIndex i = 0; i < guard.deviceCount(); ++i) {
      try {
        guard.synchronizeDevice(i);
      } catch (const c10::Error& e) {
        errors_.push_back(e.what_without_backtrace());
      }
    }
    trace_stop();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  // The profiler's operator on this thread: launches made now are its work.
  void pushCorrelationId(uint64_t id) override { trace_push_correlation(id); }
  void popCorrelationId() override { trace_pop_correlation(); }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t start,
                    int64_t end) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start, end, "openreg");
    int32_t id = 0;
    for (const TraceActivity& a : trace_take_activities()) {
      const ActivityType type = type_of(a.kind);
      if (!types_.contains(type)) {
        continue;
      }
      auto activity = std::make_unique<libkineto::GenericTraceActivity>(
          buffer_->span, type, std::string(a.name.data(), a.name.size()));
      activity->startTime = static_cast<int64_t>(a.start_ns) + offset_ns_;
      activity->endTime = static_cast<int64_t>(a.end_ns) + offset_ns_;
      activity->id = ++id;
      activity->device = static_cast<int32_t>(a.device);  // the trace's process row
      activity->resource = static_cast<int64_t>(a.stream);  // its thread row: one per stream
      activity->addMetadata("stream", a.stream);
      activity->addMetadata("device", a.device);
      if (a.correlation != 0) {
        // Linked to the operator that launched it; the flow is the trace viewer's arrow.
        activity->addMetadata("correlation", a.correlation);
        activity->flow.id = static_cast<uint32_t>(a.correlation);
        activity->flow.type = libkineto::kLinkAsyncCpuGpu;
        activity->flow.start = false;
        if (linked) {
          activity->linked = linked(static_cast<int32_t>(a.correlation));
        }
      }
      streams_.insert({a.device, a.stream});
      logger.handleGenericActivity(*activity);
      buffer_->activities.push_back(std::move(activity));
    }
    buffer_->gpuOpCount = static_cast<int>(buffer_->activities.size());
  }

  std::vector<std::string> errors() override { return errors_; }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  // One named row per stream in the trace viewer.
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> rows;
    for (const auto& [device, stream] : streams_) {
      rows.push_back({static_cast<int64_t>(stream), static_cast<int64_t>(stream), device,
                      "openreg:" + std::to_string(device) + " stream " + std::to_string(stream)});
    }
    return rows;
  }

  // The activities' owner: the logger keeps pointers to them.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

 private:
  std::set<ActivityType> types_;
  int64_t offset_ns_ = 0;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<std::pair<int64_t, uint64_t>> streams_;
  std::vector<std::string> errors_;
};
// ANCHOR_END: session

// ANCHOR: profiler
class OpenRegActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return available_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config& /*config*/) override {
    std::set<ActivityType> wanted;
    for (ActivityType t : types) {
      if (available_.contains(t)) {
        wanted.insert(t);
      }
    }
    return std::make_unique<OpenRegSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "openreg";
  std::set<ActivityType> available_ = {ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                       ActivityType::GPU_USER_ANNOTATION};
};
// ANCHOR_END: profiler

} // namespace

// ANCHOR: register_activity_profiler
// What REGISTER_PRIVATEUSE1_PROFILER(OpenRegActivityProfiler) does, without a static object
// the linker could drop. PyTorch hands the factory to Kineto when Kineto initialises.
void register_activity_profiler() {
  static const bool registered = [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::make_unique<OpenRegActivityProfiler>(); });
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_activity_profiler

} // namespace openreg
