// ProcessGroupOCCL: the `occl` backend of torch.distributed, a C++ c10d::Backend as every
// vendor's collective library plugs in (NCCL, XCCL, HCCL). c10d owns process groups, the
// store, DDP, FSDP2 and DTensor; this class turns each collective into one OCCL operation
// queued on a stream, and each operation's completion into a c10d::Work.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "rust/cxx.h"

namespace openreg {
namespace occl {
struct Communicator;  // the Rust side (src/high_level/distributed.rs)
struct Work;
struct OpArgs;
}  // namespace occl

// ANCHOR: class
class ProcessGroupOCCL : public c10d::Backend {
 public:
  // What init_process_group(pg_options=...) can set: how long a rank waits for a peer, and
  // whether ranks on one host share memory (unset: yes, unless OCCL_SHM=0).
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = std::chrono::minutes(10),
                     std::optional<bool> shared_memory = std::nullopt);
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override;
    std::optional<bool> shared_memory;
  };

  class WorkOCCL;
  class Watchdog;

  ProcessGroupOCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options);
  ~ProcessGroupOCCL() override;

  const std::string getBackendName() const override { return "occl"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsCoalescing() const override { return true; }
  bool supportsSplitting() const override { return true; }
  // ANCHOR_END: class

  // How this rank reaches each rank of the group: "shm", "tcp" or "self".
  std::vector<std::string> transports() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;

  void shutdown() override;
  void abort() override;

 private:
  // One collective's plan: what to queue, the tensors it reads and writes, and what to run
  // on its stream after it (copies out of a temporary buffer).
  struct Launch;
  c10::intrusive_ptr<c10d::Work> launch(const char* name, c10d::OpType type, bool async,
                                        Launch& plan);
  c10::DeviceIndex check(const char* name, const std::vector<at::Tensor>& tensors) const;
  c10::intrusive_ptr<c10d::Work> group(std::vector<c10::intrusive_ptr<WorkOCCL>> works);
  void close(const std::string& why);

  c10::intrusive_ptr<Options> options_;
  rust::Box<occl::Communicator> comm_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;  // async collectives' stream per device
  std::optional<std::vector<c10::intrusive_ptr<WorkOCCL>>> coalescing_;
  std::atomic<bool> closed_{false};
  // ProcessGroupNCCL's watchdog: a thread that completes the futures asked for and aborts
  // the communicator when an operation outlives its timeout. Shared with the Works, which
  // may outlive the group.
  std::shared_ptr<Watchdog> watchdog_;
};

// ANCHOR: work
class ProcessGroupOCCL::WorkOCCL : public c10d::Work {
 public:
  WorkOCCL(int rank, c10d::OpType type, std::vector<rust::Box<occl::Work>> handles,
           std::shared_ptr<c10::Event> end, c10::Stream stream, std::vector<at::Tensor> outputs,
           std::chrono::milliseconds timeout, std::shared_ptr<Watchdog> watchdog);
  ~WorkOCCL() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  std::chrono::milliseconds getTimeout() const override { return timeout_; }
  // ANCHOR_END: work

 private:
  friend class ProcessGroupOCCL;
  // The first failure's message, or nothing while running or after success.
  std::optional<std::string> failure() const;
  // Ends the profiler's event for the operation, once, when it is first seen finished.
  void recordEnd();
  // For the watchdog: waits at most `slice` for the operations; true once all finished.
  bool waitFor(std::chrono::milliseconds slice);
  // For the watchdog, once finished: completes the future (after the stream ran the copies
  // that follow the operation) or fails it.
  void completeFuture(const std::optional<std::string>& why = std::nullopt);

  std::vector<rust::Box<occl::Work>> handles_;
  std::shared_ptr<c10::Event> end_;  // recorded on the stream after the operation
  c10::Stream stream_;               // that stream
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Watchdog> watchdog_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made when first asked for
  std::once_flag recorded_;
};

}  // namespace openreg
