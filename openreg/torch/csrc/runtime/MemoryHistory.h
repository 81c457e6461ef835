#pragma once
// Tracebacks for the allocator's history (declarations for the cxx bridge, src/ffi.rs). Kept
// free of torch headers: the bridge includes this file before its own declarations.

#include <cstddef>
#include <memory>
#include <vector>

#include "rust/cxx.h"

namespace openreg {

struct SymbolizedFrame;

// Where one allocation or free came from: a torch::CapturedTraceback, held as void so that
// this header needs no torch header.
struct Traceback {
  std::shared_ptr<void> captured;
};

std::shared_ptr<Traceback> gather_traceback(bool python, bool cpp);

// Collects tracebacks, then symbolizes them all at once: torch::symbolize looks up each C++
// address once however many tracebacks share it.
class Symbolizer {
 public:
  size_t add(const std::shared_ptr<Traceback>& traceback);
  rust::Vec<SymbolizedFrame> symbolize();

 private:
  std::vector<std::shared_ptr<Traceback>> tracebacks_;
};

std::unique_ptr<Symbolizer> new_symbolizer();

} // namespace openreg
