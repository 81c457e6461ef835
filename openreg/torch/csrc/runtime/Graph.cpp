// Accelerator graphs: at::GraphImplInterface for `torch.accelerator.Graph` on openreg. The
// runtime records what is launched on the capturing stream instead of running it, and replays
// the recording with one enqueue (src/runtime/graph.rs, runtime's graph.rs). This file keeps
// the interface's state machine: capture, instantiate, replay, reset.

#include "OpenReg.h"

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace openreg {
namespace {

// ANCHOR: graph
class OpenRegGraph final : public at::GraphImplInterface {
 public:
  explicit OpenRegGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}

  ~OpenRegGraph() override {
    if (capturing_) {
      try {
        end();  // a graph dropped mid-capture must not leave its stream capturing
      } catch (...) {
      }
    }
    graph_.reset();  // the recording first: its tasks hold the pool's blocks
    release_pool();
  }

  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(!capturing_, "capture_begin: this graph is already capturing");
    TORCH_CHECK(!graph_.has_value(),
                "capture_begin: this graph already holds a capture; call reset() first");
    const c10::impl::VirtualGuardImpl guard(kOpenReg);
    stream_ = guard.getStream(guard.getDevice());
    // The capture allocates from a memory pool (torch.openreg.MemPool) that the graph keeps
    // until it is reset or destroyed: one given by pool= (another graph's pool(), a MemPool's
    // id) is shared; {0, 0} asks for a private one.
    const uint64_t id = call([&]() -> uint64_t {
      if (pool.second == 0) {
        return mem_pool_create(stream_.device_index());
      }
      mem_pool_retain(pool.second);
      return pool.second;
    });
    try {
      call([&] {
        graph_capture_begin(stream_.device_index(), stream_.id(), id, static_cast<uint8_t>(mode));
      });
    } catch (...) {
      mem_pool_release(id);
      throw;
    }
    pool_ = {0, id};
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "capture_end: capture_begin was not called");
    end();
    if (!keep_graph_) {
      instantiate();
    }
  }

  // Our capture needs no separate executable form: instantiating only marks it ready.
  void instantiate() override {
    TORCH_CHECK(graph_.has_value(), "instantiate: nothing has been captured");
    instantiated_ = true;
  }

  void replay() override {
    TORCH_CHECK(!capturing_, "replay: the capture has not ended (call capture_end first)");
    TORCH_CHECK(graph_.has_value(), "replay: nothing has been captured");
    if (!instantiated_) {
      instantiate();
    }
    call([&] { graph_replay(**graph_); });
  }

  void reset() override {
    if (capturing_) {
      try {
        end();
      } catch (const c10::Error&) {
        // the failed capture is discarded either way
      }
    }
    graph_.reset();
    instantiated_ = false;
    release_pool();
  }

  at::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "debug_dump: call enable_debug_mode() before capturing");
    TORCH_CHECK(graph_.has_value(), "debug_dump: nothing has been captured");
    call([&] { graph_debug_dump(**graph_, path); });
  }

 private:
  void release_pool() {
    if (pool_.second != 0) {
      mem_pool_release(pool_.second);
      pool_ = {0, 0};
    }
  }

  void end() {
    capturing_ = false;
    graph_ = call([&] { return graph_capture_end(stream_.device_index(), stream_.id()); });
  }

  bool keep_graph_;
  bool capturing_ = false;
  bool instantiated_ = false;
  bool debug_ = false;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(kOpenReg, 0)};
  at::MempoolId_t pool_{0, 0};
  std::optional<rust::Box<Graph>> graph_;
};
// ANCHOR_END: graph

} // namespace

// ANCHOR: register_graph
// What REGISTER_GRAPH_IMPL(OPENREG, OpenRegGraph) does, without a static object. The key is
// c10::DeviceTypeName(PrivateUse1, false): the backend's name upper-cased, which Python sets
// only after this library loads, so it is spelled out here.
void register_graph() {
  static const bool registered = [] {
    at::GraphImplRegistry()->Register(
        "OPENREG", [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<OpenRegGraph>(args);
        });
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_graph

} // namespace openreg
