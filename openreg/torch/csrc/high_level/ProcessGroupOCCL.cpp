// ProcessGroupOCCL's collectives and Work. Each collective checks its tensors, describes the
// operation to OCCL (byte ranges, a dtype name, a reduction), queues it on a stream and wraps
// the handle OCCL returns in a WorkOCCL; the watchdog completes the futures asked for.

#include "high_level/ProcessGroupOCCL.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>

#include <ATen/core/ivalue.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include "openreg-torch/src/high_level/distributed.rs.h"

namespace openreg {
namespace {

constexpr auto kOpenReg = c10::DeviceType::PrivateUse1;

// A DistBackendError to hand on (a failed Work's exception, a future's error).
std::exception_ptr backend_error(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

// OCCL's name for a dtype, or an error naming the ones it has.
std::string dtype_name(const char* name, c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return "float32";
    case c10::kDouble: return "float64";
    case c10::kHalf: return "float16";
    case c10::kBFloat16: return "bfloat16";
    case c10::kLong: return "int64";
    case c10::kInt: return "int32";
    case c10::kShort: return "int16";
    case c10::kChar: return "int8";
    case c10::kByte: return "uint8";
    case c10::kBool: return "bool";
    default:
      TORCH_CHECK_VALUE(false, "occl ", name, ": unsupported dtype ", type,
                        "; expected one of float32, float64, float16, bfloat16, int64, int32, "
                        "int16, int8, uint8, bool");
  }
  return {};
}

std::string reduce_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    default: {
      static const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
      const char* name = op.op_ < 9 ? names[op.op_] : "UNUSED";
      TORCH_CHECK_VALUE(false, "occl: unsupported reduce op ReduceOp.", name,
                        "; expected one of SUM, AVG, PRODUCT, MIN, MAX");
    }
  }
  return {};
}

// ANCHOR: buffer
// What OCCL needs of a tensor: its bytes and the storage they lie in (the runtime checks the
// range against the storage before the device touches it).
occl::Buffer buffer(const at::Tensor& t) {
  const auto& storage = t.storage();
  return occl::Buffer{
      reinterpret_cast<size_t>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size()),
      reinterpret_cast<size_t>(storage.data()), storage.nbytes()};
}
// ANCHOR_END: buffer

occl::OpArgs args(occl::OpKind kind) {
  return occl::OpArgs{kind, {}, false, {}, false, {}, {}, 0, {}, {}};
}

// "2.0": a duration in seconds, for messages.
std::string seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

// The profiler's name for an operation: a string literal, because the RecordFunction that
// c10d::Work opens with it keeps the pointer.
const char* profiling_title(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST: return "occl:broadcast";
    case c10d::OpType::ALLREDUCE: return "occl:all_reduce";
    case c10d::OpType::REDUCE: return "occl:reduce";
    case c10d::OpType::ALLGATHER: return "occl:all_gather";
    case c10d::OpType::_ALLGATHER_BASE: return "occl:all_gather_into_tensor";
    case c10d::OpType::GATHER: return "occl:gather";
    case c10d::OpType::SCATTER: return "occl:scatter";
    case c10d::OpType::REDUCE_SCATTER: return "occl:reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "occl:reduce_scatter_tensor";
    case c10d::OpType::ALLTOALL_BASE: return "occl:all_to_all_single";
    case c10d::OpType::ALLTOALL: return "occl:all_to_all";
    case c10d::OpType::SEND: return "occl:send";
    case c10d::OpType::RECV: return "occl:recv";
    case c10d::OpType::BARRIER: return "occl:barrier";
    case c10d::OpType::COALESCED: return "occl:coalesced";
    default: return "occl:operation";
  }
}

std::chrono::milliseconds since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

}  // namespace

ProcessGroupOCCL::Options::Options(std::chrono::milliseconds timeout, std::optional<bool> shared_memory)
    : c10d::Backend::Options("occl", timeout), shared_memory(shared_memory) {
  TORCH_CHECK_VALUE(timeout.count() > 0, "occl: the timeout must be positive, got ", timeout.count(), " ms");
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupOCCL::Options::clone() const {
  return c10::make_intrusive<Options>(*this);
}

// ANCHOR: plan
struct ProcessGroupOCCL::Launch {
  occl::OpArgs op;
  std::vector<at::Tensor> tensors;   // every tensor the operation reads or writes, temporaries too
  std::vector<at::Tensor> outputs;   // the Work's result
  std::function<void()> after = {};  // runs on the operation's stream after it
};
// ANCHOR_END: plan

// ANCHOR: watchdog
class ProcessGroupOCCL::Watchdog {
 public:
  // The thread shares ownership: it may outlive the group by a callback (see stop).
  static std::shared_ptr<Watchdog> start(std::function<void(const std::string&)> abort) {
    auto watchdog = std::make_shared<Watchdog>(std::move(abort));
    watchdog->thread_ = std::thread([self = watchdog] { self->run(); });
    return watchdog;
  }

  explicit Watchdog(std::function<void(const std::string&)> abort) : abort_(std::move(abort)) {}

  // Every operation, for its timeout: only a handle and a deadline (no tensors kept alive).
  void watch(const WorkOCCL& work) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& h : work.handles_) {
      running_.push_back({h->share(), std::chrono::steady_clock::now() + 2 * work.timeout_, work.timeout_});
    }
  }

  // A future someone asked for (DDP's reducer, a comm hook): completed in issue order.
  // False once stopped: the caller completes it itself.
  bool complete(c10::intrusive_ptr<WorkOCCL> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) {
        return false;
      }
      futures_.push_back(std::move(work));
    }
    cv_.notify_one();
    return true;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();  // the group's last reference went away inside a future's callback
      } else {
        thread_.join();
      }
    }
  }

 private:
  struct Running {
    rust::Box<occl::Work> handle;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_ || !futures_.empty(); });
      checkTimeouts(lock);
      if (futures_.empty()) {
        if (stop_) {
          return;
        }
        continue;
      }
      auto work = futures_.front();
      futures_.pop_front();
      auto slice = std::chrono::milliseconds(stop_ ? 0 : 100);
      lock.unlock();
      // In slices: a stop request, or a timeout, is seen while a collective hangs.
      bool finished = work->waitFor(slice);
      lock.lock();
      while (!finished && !stop_) {
        checkTimeouts(lock);
        lock.unlock();
        finished = work->waitFor(std::chrono::milliseconds(100));
        lock.lock();
      }
      lock.unlock();
      // Callbacks run here, and may take the GIL: never with our lock held.
      if (finished) {
        work->completeFuture();
      } else {
        work->completeFuture(std::string("occl: the process group was destroyed before the operation completed"));
      }
      lock.lock();
    }
  }

  // OCCL's own receive timeout fires first; this is the backstop for an operation that never
  // got as far as a receive (its stream stuck behind other work).
  void checkTimeouts(std::unique_lock<std::mutex>& lock) {
    if (stop_) {  // the communicator is closed, or gone
      return;
    }
    auto now = std::chrono::steady_clock::now();
    std::optional<std::chrono::milliseconds> expired;
    std::erase_if(running_, [&](const Running& r) {
      if (r.handle->status() != occl::Status::Running) {
        return true;
      }
      if (now > r.deadline) {
        expired = r.timeout;
      }
      return false;
    });
    if (expired) {
      lock.unlock();
      abort_(c10::str("occl watchdog: an operation did not complete within ", seconds(2 * *expired),
                      " s; the communicator was aborted"));
      lock.lock();
    }
  }

  std::function<void(const std::string&)> abort_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkOCCL>> futures_;
  std::vector<Running> running_;
  bool stop_ = false;
  std::thread thread_;
};
// ANCHOR_END: watchdog

// ---------------------------------------------------------------------------------------------
// WorkOCCL

ProcessGroupOCCL::WorkOCCL::WorkOCCL(int rank, c10d::OpType type, std::vector<rust::Box<occl::Work>> handles,
                                     std::shared_ptr<c10::Event> end, c10::Stream stream, std::vector<at::Tensor> outputs,
                                     std::chrono::milliseconds timeout, std::shared_ptr<Watchdog> watchdog)
    // With a title, c10d::Work opens a RecordFunction: the profiler shows the operation from
    // launch to completion (recordEnd closes it).
    : c10d::Work(rank, type, profiling_title(type)),
      handles_(std::move(handles)),
      end_(std::move(end)),
      stream_(stream),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      watchdog_(std::move(watchdog)) {}

ProcessGroupOCCL::WorkOCCL::~WorkOCCL() {
  recordEnd();  // never observed: the profiler's event ends here
}

void ProcessGroupOCCL::WorkOCCL::recordEnd() {
  std::call_once(recorded_, [&] {
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();
    }
  });
}

// ANCHOR: work_methods
bool ProcessGroupOCCL::WorkOCCL::isCompleted() {
  for (const auto& h : handles_) {
    if (h->status() == occl::Status::Running) {
      return false;
    }
  }
  if (failure().has_value() || end_->query()) {
    recordEnd();
    return true;
  }
  return false;
}

bool ProcessGroupOCCL::WorkOCCL::isSuccess() const {
  for (const auto& h : handles_) {
    if (h->status() != occl::Status::Succeeded) {
      return false;
    }
  }
  return end_->query();
}

std::exception_ptr ProcessGroupOCCL::WorkOCCL::exception() const {
  auto why = failure();
  return why ? backend_error(*why) : nullptr;
}

bool ProcessGroupOCCL::WorkOCCL::wait(std::chrono::milliseconds timeout) {
  // Blocks the host, as ProcessGroupNCCL does with TORCH_NCCL_BLOCKING_WAIT=1, so that a
  // failure is raised here; c10d calls wait() with the GIL released.
  auto start = std::chrono::steady_clock::now();
  for (const auto& h : handles_) {
    int64_t left = -1;  // kNoTimeout (0) means no bound
    if (timeout.count() > 0) {
      left = std::max<int64_t>(0, (timeout - since(start)).count());
    }
    auto status = h->wait(left);
    if (status != occl::Status::Running && &h == &handles_.back()) {
      recordEnd();
    }
    if (status == occl::Status::Running) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("occl ", std::string(h->describe()), " did not complete within ",
                               seconds(timeout), " s"));
    }
    if (status == occl::Status::Failed) {
      C10_THROW_ERROR(DistBackendError, std::string(h->error()));
    }
  }
  blockCurrentStream();
  return true;
}

void ProcessGroupOCCL::WorkOCCL::synchronize() {
  blockCurrentStream();
}

// Later work on the current stream waits for the operation and the copies after it.
void ProcessGroupOCCL::WorkOCCL::blockCurrentStream() {
  c10::impl::VirtualGuardImpl impl(kOpenReg);
  auto current = impl.getStream(c10::Device(kOpenReg, end_->device_index()));
  if (current != stream_) {  // on its own stream, the order is already there
    end_->block(current);
  }
}

c10::intrusive_ptr<c10::ivalue::Future> ProcessGroupOCCL::WorkOCCL::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) {
    // A CPU future, completed once the device finished: its callbacks need no stream
    // synchronization. (ProcessGroupNCCL's is device-aware and complete at launch.)
    static const auto type = c10::ListType::create(c10::TensorType::get());
    future_ = c10::make_intrusive<c10::ivalue::Future>(type);
    if (waitFor(std::chrono::milliseconds(0))) {  // already finished: no thread needed
      completeFuture();
    } else if (!watchdog_->complete(c10::intrusive_ptr<WorkOCCL>::reclaim_copy(this))) {
      completeFuture(std::string("occl: the process group was destroyed"));  // the group is gone
    }
  }
  return future_;
}

std::vector<at::Tensor> ProcessGroupOCCL::WorkOCCL::result() {
  return outputs_;
}
// ANCHOR_END: work_methods

std::optional<std::string> ProcessGroupOCCL::WorkOCCL::failure() const {
  for (const auto& h : handles_) {
    if (h->status() == occl::Status::Failed) {
      return std::string(h->error());
    }
  }
  return std::nullopt;
}

bool ProcessGroupOCCL::WorkOCCL::waitFor(std::chrono::milliseconds slice) {
  auto start = std::chrono::steady_clock::now();
  for (const auto& h : handles_) {
    auto left = std::max<int64_t>(0, (slice - since(start)).count());
    if (h->wait(left) == occl::Status::Running) {
      return false;
    }
  }
  return true;
}

void ProcessGroupOCCL::WorkOCCL::completeFuture(const std::optional<std::string>& why) {
  recordEnd();
  try {
    auto failed = why ? why : failure();
    if (failed) {
      future_->setError(backend_error(*failed));
    } else {
      end_->synchronize();  // the copies after the operation ran, too
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (const std::exception&) {
    future_->setErrorIfNeeded(std::current_exception());
  }
}

// ---------------------------------------------------------------------------------------------
// ProcessGroupOCCL

// ANCHOR: constructor
ProcessGroupOCCL::ProcessGroupOCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      comm_([&] {
        TORCH_CHECK_VALUE(size >= 1 && rank >= 0 && rank < size, "occl: rank ", rank,
                          " is out of range for a world of size ", size, " (expected 0 <= rank < ", size, ")");
        // Rendezvous: publish where this rank listens, read where the others do. c10d
        // prefixes the store per process group.
        auto listener = occl::listen();
        auto here = std::string(occl::advertised_host()) + ":" + std::to_string(listener->port());
        store->set("occl/address/" + std::to_string(rank), std::vector<uint8_t>(here.begin(), here.end()));
        rust::Vec<rust::String> addresses;
        for (int r = 0; r < size; ++r) {
          auto bytes = store->get("occl/address/" + std::to_string(r));
          addresses.push_back(rust::String(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        }
        bool shm = options_->shared_memory.value_or([] {
          const char* env = std::getenv("OCCL_SHM");
          return env == nullptr || std::string(env) != "0";
        }());
        try {
          return occl::connect(std::move(listener), rank, size, std::move(addresses),
                               static_cast<uint64_t>(options_->timeout.count()), shm);
        } catch (const rust::Error& e) {
          C10_THROW_ERROR(DistBackendError, e.what());
        }
      }()),
      watchdog_(Watchdog::start([comm = &*comm_](const std::string& why) { comm->abort(why); })) {}
// ANCHOR_END: constructor

ProcessGroupOCCL::~ProcessGroupOCCL() {
  close("the process group was destroyed");
}

std::vector<std::string> ProcessGroupOCCL::transports() const {
  std::vector<std::string> out;
  for (const auto& t : comm_->transports()) {
    out.emplace_back(t);
  }
  return out;
}

c10::DeviceIndex ProcessGroupOCCL::check(const char* name, const std::vector<at::Tensor>& tensors) const {
  if (closed_) {
    C10_THROW_ERROR(DistBackendError, c10::str("occl ", name, ": the process group was destroyed"));
  }
  std::optional<c10::DeviceIndex> device;
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(t.device().type() == kOpenReg, "occl ", name,
                      ": expected openreg tensors, got a tensor on ", t.device(),
                      "; for CPU tensors give the group a CPU backend too: "
                      "init_process_group('cpu:gloo,openreg:occl')");
    TORCH_CHECK_VALUE(t.is_contiguous(), "occl ", name, ": tensors must be contiguous (got strides ",
                      t.strides(), ")");
    TORCH_CHECK_VALUE(!device || *device == t.device().index(), "occl ", name,
                      ": all tensors must be on one device, got openreg:", static_cast<int>(*device),
                      " and ", t.device());
    device = t.device().index();
  }
  if (device) {
    return *device;
  }
  if (auto bound = getBoundDeviceId()) {
    return bound->index();
  }
  return c10::impl::VirtualGuardImpl(kOpenReg).getDevice().index();
}

// ANCHOR: launch
c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::launch(const char* name, c10d::OpType type, bool async,
                                                        Launch& plan) {
  auto device = c10::Device(kOpenReg, check(name, plan.tensors));
  c10::impl::VirtualGuardImpl impl(kOpenReg);
  c10::Stream current = impl.getStream(device);
  c10::Stream stream = current;
  if (async) {
    // async_op=True: a stream of the group's own, after the current stream's work, so that
    // the collective overlaps with the compute that follows.
    auto it = streams_.find(device.index());
    if (it == streams_.end()) {
      it = streams_.emplace(device.index(), impl.getNewStream(device)).first;
    }
    stream = it->second;
    c10::Event ready(kOpenReg);
    ready.record(current);
    ready.block(stream);
  }
  c10::StreamGuard on(stream);
  rust::Box<occl::Work> handle = [&] {
    try {
      return comm_->launch(device.index(), stream.id(), plan.op);
    } catch (const rust::Error& e) {
      // A broken communicator is a backend failure; anything else is a bad argument.
      if (comm_->broken()) {
        C10_THROW_ERROR(DistBackendError, e.what());
      }
      C10_THROW_ERROR(ValueError, e.what());
    }
  }();
  if (plan.after) {
    plan.after();
  }
  auto end = std::make_shared<c10::Event>(kOpenReg);
  end->record(stream);
  // On another stream, the caching allocator must not hand these (temporaries included) to
  // new tensors before that stream ran the operation; on the current one, stream order does it.
  if (stream != current) {
    for (const auto& t : plan.tensors) {
      impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
    }
  }
  std::vector<rust::Box<occl::Work>> handles;
  handles.push_back(std::move(handle));
  auto work = c10::make_intrusive<WorkOCCL>(getRank(), type, std::move(handles), std::move(end), stream,
                                            std::move(plan.outputs), options_->timeout, watchdog_);
  watchdog_->watch(*work);
  if (coalescing_) {
    coalescing_->push_back(work);
  }
  return work;
}
// ANCHOR_END: launch

// A Work for several: done when all are, its stream position the last one's.
c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::group(std::vector<c10::intrusive_ptr<WorkOCCL>> works) {
  std::vector<rust::Box<occl::Work>> handles;
  std::vector<at::Tensor> outputs;
  for (const auto& w : works) {
    for (const auto& h : w->handles_) {
      handles.push_back(h->share());
    }
    outputs.insert(outputs.end(), w->outputs_.begin(), w->outputs_.end());
  }
  std::shared_ptr<c10::Event> end;
  std::optional<c10::Stream> stream;
  if (works.empty()) {  // nothing was issued: a Work that is done once the stream got here
    c10::impl::VirtualGuardImpl impl(kOpenReg);
    stream = impl.getStream(c10::Device(kOpenReg, check("coalesced", {})));
    end = std::make_shared<c10::Event>(kOpenReg);
    end->record(*stream);
  } else {
    end = works.back()->end_;
    stream = works.back()->stream_;
  }
  return c10::make_intrusive<WorkOCCL>(getRank(), c10d::OpType::COALESCED, std::move(handles), std::move(end),
                                       *stream, std::move(outputs), options_->timeout, watchdog_);
}


void ProcessGroupOCCL::close(const std::string& why) {
  if (!closed_.exchange(true)) {
    comm_->abort(c10::str("rank ", getRank(), ": ", why));
  }
  watchdog_->stop();
}

void ProcessGroupOCCL::shutdown() {
  close("the process group was destroyed");
}

void ProcessGroupOCCL::abort() {
  close("the process group was aborted");
}

// ---------------------------------------------------------------------------------------------
// The collectives

namespace {
const at::Tensor& one(const char* name, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "occl ", name, ": expected one tensor per process, got ",
                    tensors.size());
  return tensors[0];
}

void check_list(const char* name, const std::vector<at::Tensor>& tensors, const at::Tensor& like, int size) {
  TORCH_CHECK_VALUE(static_cast<int>(tensors.size()) == size, "occl ", name, ": expected ", size,
                    " tensors (one per rank), got ", tensors.size());
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(t.sizes() == like.sizes() && t.scalar_type() == like.scalar_type(), "occl ", name,
                      ": every tensor of the list must match the input (", like.sizes(), ", ",
                      like.scalar_type(), "); got (", t.sizes(), ", ", t.scalar_type(), ")");
  }
}
}  // namespace

// ANCHOR: allreduce
c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const auto& t = one("all_reduce", tensors);
  Launch plan{args(occl::OpKind::AllReduce), {t}, {t}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("all_reduce", t.scalar_type());
  plan.op.reduce_op = reduce_name(opts.reduceOp);
  return launch("all_reduce", c10d::OpType::ALLREDUCE, opts.asyncOp, plan);
}
// ANCHOR_END: allreduce

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<c10::intrusive_ptr<WorkOCCL>> works;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one_tensor{t};
    works.push_back(c10::static_intrusive_pointer_cast<WorkOCCL>(allreduce(one_tensor, opts)));
  }
  return group(std::move(works));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const auto& t = tensors.size() > 1 ? tensors.at(opts.rootTensor) : one("broadcast", tensors);
  Launch plan{args(occl::OpKind::Broadcast), {t}, {t}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("broadcast", t.scalar_type());
  plan.op.root = static_cast<size_t>(opts.rootRank);
  return launch("broadcast", c10d::OpType::BROADCAST, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const auto& t = one("reduce", tensors);
  Launch plan{args(occl::OpKind::Reduce), {t}, {t}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("reduce", t.scalar_type());
  plan.op.reduce_op = reduce_name(opts.reduceOp);
  plan.op.root = static_cast<size_t>(opts.rootRank);
  return launch("reduce", c10d::OpType::REDUCE, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::all_gather_single(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions& opts) {
  Launch plan{args(occl::OpKind::AllGather), {output, input}, {output}};
  plan.op.input = buffer(input);
  plan.op.output = buffer(output);
  plan.op.dtype = dtype_name("all_gather_into_tensor", input.scalar_type());
  return launch("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather(std::vector<std::vector<at::Tensor>>& output_lists,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  const auto& t = one("all_gather", inputs);
  TORCH_CHECK_VALUE(output_lists.size() == 1, "occl all_gather: expected one output list, got ", output_lists.size());
  auto outputs = output_lists[0];
  check_list("all_gather", outputs, t, getSize());
  // Gathered into one buffer, then copied out on the same stream.
  std::vector<int64_t> shape{getSize()};
  shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
  auto flat = at::empty(shape, t.options());
  std::vector<at::Tensor> tensors{t, flat};  // the temporary too: see launch's record
  tensors.insert(tensors.end(), outputs.begin(), outputs.end());
  Launch plan{args(occl::OpKind::AllGather), tensors, outputs};
  plan.op.input = buffer(t);
  plan.op.output = buffer(flat);
  plan.op.dtype = dtype_name("all_gather", t.scalar_type());
  plan.after = [outputs, flat]() mutable {
    for (size_t r = 0; r < outputs.size(); ++r) {
      outputs[r].copy_(flat[static_cast<int64_t>(r)]);
    }
  };
  return launch("all_gather", c10d::OpType::ALLGATHER, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(output_lists.size() == inputs.size(), "occl all_gather_coalesced: ", output_lists.size(),
                    " output lists for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<WorkOCCL>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> outs{output_lists[i]};
    std::vector<at::Tensor> ins{inputs[i]};
    works.push_back(c10::static_intrusive_pointer_cast<WorkOCCL>(allgather(outs, ins, opts)));
  }
  return group(std::move(works));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "occl all_gather_into_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<WorkOCCL>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    works.push_back(c10::static_intrusive_pointer_cast<WorkOCCL>(all_gather_single(outputs[i], inputs[i], opts)));
  }
  return group(std::move(works));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  Launch plan{args(occl::OpKind::ReduceScatter), {output, input}, {output}};
  plan.op.input = buffer(input);
  plan.op.output = buffer(output);
  plan.op.dtype = dtype_name("reduce_scatter_tensor", input.scalar_type());
  plan.op.reduce_op = reduce_name(opts.reduceOp);
  return launch("reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& input_lists,
                                                                const c10d::ReduceScatterOptions& opts) {
  const auto& out = one("reduce_scatter", outputs);
  TORCH_CHECK_VALUE(input_lists.size() == 1, "occl reduce_scatter: expected one input list, got ", input_lists.size());
  const auto& inputs = input_lists[0];
  check_list("reduce_scatter", inputs, out, getSize());
  check("reduce_scatter", inputs);
  auto flat = at::stack(inputs);
  std::vector<at::Tensor> tensors{out, flat};
  tensors.insert(tensors.end(), inputs.begin(), inputs.end());
  Launch plan{args(occl::OpKind::ReduceScatter), tensors, {out}};
  plan.op.input = buffer(flat);
  plan.op.output = buffer(out);
  plan.op.dtype = dtype_name("reduce_scatter", out.scalar_type());
  plan.op.reduce_op = reduce_name(opts.reduceOp);
  return launch("reduce_scatter", c10d::OpType::REDUCE_SCATTER, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "occl reduce_scatter_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<WorkOCCL>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    works.push_back(c10::static_intrusive_pointer_cast<WorkOCCL>(reduce_scatter_single(outputs[i], inputs[i], opts)));
  }
  return group(std::move(works));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_splits,
                                                                   std::vector<int64_t>& input_splits,
                                                                   const c10d::AllToAllOptions& opts) {
  // Splits in rows of the first dimension, as c10d gives them, to bytes.
  auto bytes = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    int64_t row = (rows ? t.numel() / rows : 0) * t.element_size();
    rust::Vec<size_t> out;
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % getSize() == 0, "occl all_to_all_single: the ", what, "'s first dimension (", rows,
                        ") does not divide by the group's size (", getSize(), "); pass split sizes");
      for (int r = 0; r < getSize(); ++r) {
        out.push_back(static_cast<size_t>(rows / getSize() * row));
      }
      return out;
    }
    int64_t total = 0;
    for (auto n : splits) {
      total += n;
    }
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == getSize() && total == rows, "occl all_to_all_single: ",
                      what, " split sizes ", splits, " must be ", getSize(),
                      " numbers adding up to the first dimension (", rows, ")");
    for (auto n : splits) {
      TORCH_CHECK_VALUE(n >= 0, "occl all_to_all_single: ", what, " split sizes ", splits, " must not be negative");
      out.push_back(static_cast<size_t>(n * row));
    }
    return out;
  };
  Launch plan{args(occl::OpKind::AllToAll), {output, input}, {output}};
  plan.op.input = buffer(input);
  plan.op.output = buffer(output);
  plan.op.input_splits = bytes(input, input_splits, "input");
  plan.op.output_splits = bytes(output, output_splits, "output");
  plan.op.dtype = dtype_name("all_to_all_single", input.scalar_type());
  return launch("all_to_all_single", c10d::OpType::ALLTOALL_BASE, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize() && static_cast<int>(inputs.size()) == getSize(),
                    "occl all_to_all: expected ", getSize(), " input and output tensors, got ", inputs.size(),
                    " and ", outputs.size());
  std::vector<at::Tensor> tensors(outputs);
  tensors.insert(tensors.end(), inputs.begin(), inputs.end());
  check("all_to_all", tensors);
  std::vector<at::Tensor> flat_inputs;
  rust::Vec<size_t> in_splits, out_splits;
  int64_t out_numel = 0;
  for (const auto& i : inputs) {
    flat_inputs.push_back(i.reshape({-1}));
    in_splits.push_back(static_cast<size_t>(i.numel() * i.element_size()));
  }
  for (const auto& o : outputs) {
    out_splits.push_back(static_cast<size_t>(o.numel() * o.element_size()));
    out_numel += o.numel();
  }
  auto flat_in = at::cat(flat_inputs);
  auto flat_out = at::empty({out_numel}, outputs[0].options());
  tensors.push_back(flat_in);
  tensors.push_back(flat_out);
  Launch plan{args(occl::OpKind::AllToAll), tensors, outputs};
  plan.op.input = buffer(flat_in);
  plan.op.output = buffer(flat_out);
  plan.op.input_splits = std::move(in_splits);
  plan.op.output_splits = std::move(out_splits);
  plan.op.dtype = dtype_name("all_to_all", flat_in.scalar_type());
  plan.after = [outputs, flat_out]() mutable {
    int64_t at = 0;
    for (auto& o : outputs) {
      o.copy_(flat_out.narrow(0, at, o.numel()).view(o.sizes()));
      at += o.numel();
    }
  };
  return launch("all_to_all", c10d::OpType::ALLTOALL, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::gather(std::vector<std::vector<at::Tensor>>& output_lists,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const auto& t = one("gather", inputs);
  bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> outputs = output_lists.empty() ? std::vector<at::Tensor>{} : output_lists[0];
  std::vector<at::Tensor> tensors{t};
  Launch plan{args(occl::OpKind::Gather), {}, {}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("gather", t.scalar_type());
  plan.op.root = static_cast<size_t>(opts.rootRank);
  if (root) {
    check_list("gather", outputs, t, getSize());
    std::vector<int64_t> shape{getSize()};
    shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
    auto flat = at::empty(shape, t.options());
    tensors.insert(tensors.end(), outputs.begin(), outputs.end());
    tensors.push_back(flat);
    plan.op.output = buffer(flat);
    plan.op.has_output = true;
    plan.after = [outputs, flat]() mutable {
      for (size_t r = 0; r < outputs.size(); ++r) {
        outputs[r].copy_(flat[static_cast<int64_t>(r)]);
      }
    };
  }
  plan.tensors = tensors;
  plan.outputs = outputs;
  return launch("gather", c10d::OpType::GATHER, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& input_lists,
                                                         const c10d::ScatterOptions& opts) {
  const auto& t = one("scatter", outputs);
  Launch plan{args(occl::OpKind::Scatter), {t}, {t}};
  plan.op.output = buffer(t);
  plan.op.dtype = dtype_name("scatter", t.scalar_type());
  plan.op.root = static_cast<size_t>(opts.rootRank);
  if (opts.rootRank == getRank()) {
    std::vector<at::Tensor> inputs = input_lists.empty() ? std::vector<at::Tensor>{} : input_lists[0];
    check_list("scatter", inputs, t, getSize());
    check("scatter", inputs);
    auto flat = at::stack(inputs);
    plan.tensors.push_back(flat);
    plan.op.input = buffer(flat);
    plan.op.has_input = true;
  }
  return launch("scatter", c10d::OpType::SCATTER, opts.asyncOp, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const auto& t = one("send", tensors);
  Launch plan{args(occl::OpKind::Send), {t}, {t}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("send", t.scalar_type());
  TORCH_CHECK_VALUE(dst >= 0, "occl send: peer ", dst, " is out of range for a group of size ", getSize());
  plan.op.root = static_cast<size_t>(dst);
  return launch("send", c10d::OpType::SEND, false, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const auto& t = one("recv", tensors);
  Launch plan{args(occl::OpKind::Recv), {t}, {t}};
  plan.op.input = buffer(t);
  plan.op.dtype = dtype_name("recv", t.scalar_type());
  TORCH_CHECK_VALUE(src >= 0, "occl recv: peer ", src, " is out of range for a group of size ", getSize());
  plan.op.root = static_cast<size_t>(src);
  return launch("recv", c10d::OpType::RECV, false, plan);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "occl: recv without a source rank is not supported; pass src=");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::barrier(const c10d::BarrierOptions& opts) {
  Launch plan{args(occl::OpKind::Barrier), {}, {}};
  return launch("barrier", c10d::OpType::BARRIER, opts.asyncOp, plan);
}

// ANCHOR: coalescing
// dist._coalescing_manager: the operations are issued as they come; the Work that
// endCoalescing returns completes when all of them have.
void ProcessGroupOCCL::startCoalescing() {
  coalescing_.emplace();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::endCoalescing() {
  auto works = coalescing_.value_or(std::vector<c10::intrusive_ptr<WorkOCCL>>{});
  coalescing_.reset();
  return group(std::move(works));
}
// ANCHOR_END: coalescing

// ANCHOR: split
// dist.split_group / new_group(..., device_id): c10d gives a store already prefixed for the
// new group and the parent's ranks that join it; a rank outside returns no backend.
c10::intrusive_ptr<c10d::Backend> ProcessGroupOCCL::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  auto it = std::find(ranks.begin(), ranks.end(), getRank());
  if (it == ranks.end()) {
    return nullptr;
  }
  auto options = c10::dynamic_intrusive_pointer_cast<Options>(opts);
  TORCH_CHECK_VALUE(options, "occl split: expected occl Options, got options for ", opts->backend);
  return c10::make_intrusive<ProcessGroupOCCL>(store->clone(), static_cast<int>(it - ranks.begin()),
                                               static_cast<int>(ranks.size()), options);
}
// ANCHOR_END: split

}  // namespace openreg
