// Tracebacks for memory snapshots. The allocator (src/runtime/allocator/history.rs) asks for
// one at each allocation while history is recorded; torch::CapturedTraceback is what CUDA's
// and XPU's allocators keep, so the frames come out as `torch.cuda._memory_viz` reads them.

#include "OpenReg.h"

#include <torch/csrc/profiler/combined_traceback.h>

namespace openreg {

// ANCHOR: gather
// Gathering is cheap (instruction pointers and Python code objects, no strings); turning them
// into names is left to the snapshot. The Python part takes the GIL if the thread can.
std::shared_ptr<Traceback> gather_traceback(bool python, bool cpp) {
  auto traceback = std::make_shared<Traceback>();
  traceback->captured = torch::CapturedTraceback::gather(python, /*script=*/python, cpp);
  return traceback;
}
// ANCHOR_END: gather

size_t Symbolizer::add(const std::shared_ptr<Traceback>& traceback) {
  tracebacks_.push_back(traceback);
  return tracebacks_.size() - 1;
}

rust::Vec<SymbolizedFrame> Symbolizer::symbolize() {
  std::vector<torch::CapturedTraceback*> raw;
  raw.reserve(tracebacks_.size());
  for (const auto& t : tracebacks_) {
    raw.push_back(static_cast<torch::CapturedTraceback*>(t->captured.get()));
  }
  const torch::SymbolizedTracebacks symbolized = torch::symbolize(raw);
  rust::Vec<SymbolizedFrame> frames;
  for (size_t i = 0; i < symbolized.tracebacks.size(); ++i) {
    for (const uint64_t index : symbolized.tracebacks[i]) {
      const auto& f = symbolized.all_frames.at(index);
      frames.push_back(SymbolizedFrame{i, rust::String::lossy(f.funcname), rust::String::lossy(f.filename),
                                       static_cast<int64_t>(f.lineno)});
    }
  }
  return frames;
}

std::unique_ptr<Symbolizer> new_symbolizer() {
  return std::make_unique<Symbolizer>();
}

} // namespace openreg
