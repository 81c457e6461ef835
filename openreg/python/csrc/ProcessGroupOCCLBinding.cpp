// The one file of this project that uses pybind11, and why: c10d's Python layer holds
// backends as pybind11 objects of torch's `Backend` class. A C++ backend reaches Python only
// as a pybind11 subclass of it, registered in the same pybind11 "internals" as torch's own
// classes, so that `ProcessGroup._register_backend` can take it back as a
// c10::intrusive_ptr<c10d::Backend>. That works when this file is compiled with the pybind11
// headers inside torch's wheel, the same compiler family and the same libstdc++ ABI
// (_GLIBCXX_USE_CXX11_ABI): pybind11 3 keys its internals by exactly those.
//
// Everything else in the package binds Rust with pyo3.

#include <Python.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "high_level/ProcessGroupOCCL.h"

namespace py = pybind11;

namespace openreg {
namespace {

// ANCHOR: holder
// The holder of a ProcessGroupOCCL in Python: a c10::intrusive_ptr (the layout c10d's
// casters expect of a Backend), whose last release drops the GIL first. Destroying the
// backend joins its watcher thread, which may be waiting for the GIL to run a future's
// Python callback (a DDP comm hook): joining it with the GIL held would deadlock.
template <typename T>
class NoGilPtr {
 public:
  NoGilPtr() = default;
  NoGilPtr(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  explicit NoGilPtr(T* raw) : ptr_(c10::intrusive_ptr<T>::unsafe_steal_from_new(raw)) {}
  NoGilPtr(const NoGilPtr&) = default;
  NoGilPtr(NoGilPtr&&) noexcept = default;
  NoGilPtr& operator=(const NoGilPtr&) = default;
  NoGilPtr& operator=(NoGilPtr&&) noexcept = default;
  ~NoGilPtr() {
    if (ptr_ && Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      ptr_.reset();
    }
  }
  T* get() const noexcept { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};
// ANCHOR_END: holder

}  // namespace
}  // namespace openreg

PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true)
PYBIND11_DECLARE_HOLDER_TYPE(T, openreg::NoGilPtr<T>, true)

namespace openreg {
namespace {

// Runs `f` without the GIL (it may block on peers), then raises its c10 error as the Python
// exception c10d's own bindings would: ValueError, DistBackendError, RuntimeError.
template <typename F>
auto without_gil(F&& f) -> decltype(f()) {
  std::exception_ptr error;
  std::optional<decltype(f())> result;
  {
    py::gil_scoped_release nogil;
    try {
      result.emplace(f());
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!error) {
    return std::move(*result);
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError& e) {
    throw py::value_error(e.what_without_backtrace());
  } catch (const c10::DistBackendError& e) {
    auto cls = py::module_::import("torch.distributed").attr("DistBackendError");
    PyErr_SetString(cls.ptr(), e.what_without_backtrace());
    throw py::error_already_set();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

using Options = ProcessGroupOCCL::Options;

// ANCHOR: bind
void bind(py::module_ m) {
  auto c10d = py::module_::import("torch._C._distributed_c10d");
  py::object backend = c10d.attr("Backend");

  auto pg = py::class_<ProcessGroupOCCL, NoGilPtr<ProcessGroupOCCL>>(m, "ProcessGroupOCCL", backend,
                                                                       "The occl backend of one process group.");

  py::class_<Options, c10::intrusive_ptr<Options>>(pg, "Options", backend.attr("Options"),
                                                   "init_process_group('occl', pg_options=...)")
      .def(py::init([](std::chrono::milliseconds timeout, std::optional<bool> shared_memory) {
             return without_gil([&] { return c10::make_intrusive<Options>(timeout, shared_memory); });
           }),
           py::arg("timeout") = std::chrono::milliseconds(std::chrono::minutes(10)),
           py::arg("shared_memory") = py::none())
      .def_readwrite("shared_memory", &Options::shared_memory)
      .def_property_readonly("timeout", [](const Options& o) { return o.timeout; });

  pg.def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     c10::intrusive_ptr<Options> options) {
           if (!options) {
             options = c10::make_intrusive<Options>();
           }
           return NoGilPtr<ProcessGroupOCCL>(
               without_gil([&] { return c10::make_intrusive<ProcessGroupOCCL>(store, rank, size, options); }));
         }),
         py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("options") = py::none())
      .def_property_readonly("transports", &ProcessGroupOCCL::transports,
                             "How this rank reaches each rank: 'shm', 'tcp' or 'self'.")
      // new_group() on a parent that supports splitting asks each rank outside the new group
      // to take part in the parent's split, because ncclCommSplit is collective over the
      // parent. OCCL connects a new group's members through the store alone: nothing to do.
      .def("perform_nocolor_split", [](ProcessGroupOCCL&, const py::object& /*device*/) {});
}
// ANCHOR_END: bind

}  // namespace
}  // namespace openreg

// Called once by the pyo3 module (lib.rs) with `torch_openreg._C`; 0 on success, else -1 with
// the Python error set.
extern "C" int openreg_bind_distributed(PyObject* module) {
  try {
    openreg::bind(py::reinterpret_borrow<py::module_>(module));
    return 0;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
  }
  return -1;
}
