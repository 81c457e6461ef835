"""The appendix "Reference tables", generated from the code: every C++ interface method the
glue overrides, every registration, environment variable, DispatchKey, and the Python API of
torch.openreg, each with its file and the chapter that explains it. Run by generate.py; a new
file without a chapter, or an environment variable without a description, is an error here.
"""

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE = "openreg/torch/csrc"
PACKAGE = "openreg/python/torch_openreg"

# ANCHOR: chapters
# Which chapter explains each file (the first pattern that matches wins).
CHAPTERS = [
    ("openreg/torch/csrc/runtime/Guard.cpp", "device.md", "Device & guard"),
    ("openreg/torch/csrc/runtime/Hooks.cpp", "hooks.md", "Hooks"),
    ("openreg/torch/csrc/runtime/*Allocator.cpp", "memory.md", "Memory & allocators"),
    ("openreg/torch/csrc/runtime/StreamOps.cpp", "memory.md", "Memory & allocators"),
    ("openreg/torch/csrc/runtime/Generator.*", "generator.md", "Generator"),
    ("openreg/torch/csrc/runtime/RandomOps.cpp", "generator.md", "Generator"),
    ("openreg/torch/csrc/runtime/Serialization.cpp", "serialization.md", "Storage & serialization"),
    ("openreg/torch/csrc/runtime/Profiler.cpp", "profiler.md", "Profiler"),
    ("openreg/torch/csrc/runtime/ActivityProfiler.cpp", "profiler.md", "Profiler"),
    ("openreg/torch/csrc/runtime/Graph.cpp", "graphs.md", "Graphs"),
    ("openreg/torch/src/runtime/graph.rs", "graphs.md", "Graphs"),
    ("openreg/runtime/src/graph.rs", "graphs.md", "Graphs"),
    ("openreg/torch/csrc/operators/*", "operators.md", "Operators"),
    ("openreg/torch/csrc/high_level/Autocast.cpp", "amp.md", "AMP"),
    ("openreg/torch/csrc/high_level/ProcessGroupOCCL.*", "distributed.md", "Distributed"),
    ("openreg/torch/csrc/high_level/AOTInductor.cpp", "export.md", "Export & deployment"),
    ("openreg/torch/src/high_level/aoti.rs", "export.md", "Export & deployment"),
    ("openreg/torch/src/high_level/compiled.rs", "compile.md", "torch.compile"),
    ("openreg/torch/src/high_level/*", "distributed.md", "Distributed"),
    ("openreg/torch/csrc/*", "architecture.md", "Architecture & build"),
    ("openreg/torch/src/operators/*", "kernels.md", "Kernels in Rust"),
    ("openreg/torch/src/runtime/stream.rs", "streams.md", "Streams & events"),
    ("openreg/torch/src/runtime/profiler.rs", "profiler.md", "Profiler"),
    ("openreg/torch/src/runtime/*", "memory.md", "Memory & allocators"),
    ("openreg/torch/src/*", "architecture.md", "Architecture & build"),
    ("openreg/runtime/src/comm/*", "distributed.md", "Distributed"),
    (f"{PACKAGE}/openreg/distributed.py", "distributed.md", "Distributed"),
    ("openreg/runtime/src/fork.rs", "generator.md", "Generator"),
    ("openreg/runtime/src/trace.rs", "profiler.md", "Profiler"),
    ("openreg/runtime/src/stream.rs", "streams.md", "Streams & events"),
    ("openreg/runtime/src/event.rs", "streams.md", "Streams & events"),
    ("openreg/runtime/src/*", "memory.md", "Memory & allocators"),
    (f"{PACKAGE}/__init__.py", "autoload.md", "Autoload"),
    ("openreg/python/pyproject.toml", "autoload.md", "Autoload"),
    (f"{PACKAGE}/openreg/random.py", "generator.md", "Generator"),
    (f"{PACKAGE}/openreg/memory.py", "memory.md", "Memory & allocators"),
    (f"{PACKAGE}/openreg/amp/*", "amp.md", "AMP"),
    (f"{PACKAGE}/openreg/custom_ops.py", "operators.md", "Operators"),
    (f"{PACKAGE}/openreg/profiler.py", "profiler.md", "Profiler"),
    (f"{PACKAGE}/openreg/_dynamo.py", "compile.md", "torch.compile"),
    (f"{PACKAGE}/openreg/_inductor.py", "compile.md", "torch.compile"),
    (f"{PACKAGE}/inductor_backend.py", "compile.md", "torch.compile"),
    ("openreg/python/openreg_triton/*", "compile.md", "torch.compile"),
    (f"{PACKAGE}/openreg/_aoti.py", "export.md", "Export & deployment"),
    (f"{PACKAGE}/include/*", "export.md", "Export & deployment"),
    ("openreg/cpp/*", "export.md", "Export & deployment"),
    (f"{PACKAGE}/openreg/*", "frontend.md", "Device module & generated methods"),
]
# ANCHOR_END: chapters

ENVIRONMENT = {
    "OPENREG_DEVICE_MEMORY": "capacity of each device in bytes (default: a quarter of RAM)",
    "OPENREG_FALLBACK_BLOCKLIST": "comma-separated operators the CPU fallback must refuse",
    "OPENREG_WARN_FALLBACK": "`1`: warn the first time each operator runs on the CPU",
    "OPENREG_NATIVE_KERNELS": "`0`: register no Rust kernels (everything falls back)",
    "OPENREG_INDUCTOR": "Inductor's path for the device: `cpp` (the default: C++ kernels on the stream's worker) or `triton` (Triton kernels, in Triton's interpreter); read when the package is imported",
    "OCCL_SHM": "`0`: ranks on one host exchange bytes over TCP instead of shared memory",
    "OCCL_SOCKET_HOST": "the address other ranks use to reach this process (default: the interface that routes to `MASTER_ADDR`)",
}

REGISTRATIONS = [
    (r"c10::SetAllocator\(", "`c10::SetAllocator(kPrivateUse1, …)`", "the device allocator"),
    (r"at::setHostAllocator\(", "`at::setHostAllocator(kPrivateUse1, …)`", "the pinned host allocator"),
    (r"DeviceGuardImplRegistrar", "`c10::impl::DeviceGuardImplRegistrar`", "the device guard"),
    (r"RegisterPrivateUse1HooksInterface\(", "`at::RegisterPrivateUse1HooksInterface`", "the PrivateUse1 hooks"),
    (r"_stub\.set_privateuse1_dispatch_ptr", "`DispatchStub::set_privateuse1_dispatch_ptr`", "DispatchStub kernels"),
    (r"PrivateUse1ProfilerRegistry", "`torch::profiler::impl::PrivateUse1ProfilerRegistry`", "the Kineto activity profiler"),
    (r"registerPrivateUse1Methods", "`torch::profiler::impl::registerPrivateUse1Methods`", "the profiler's device stubs"),
    (r"pushPRIVATEUSE1CallbacksStub", "`torch::profiler::impl::pushPRIVATEUSE1CallbacksStub`", "the PrivateUse1 profiler observer"),
    (r"GraphImplRegistry", "`at::GraphImplRegistry`", "accelerator graphs"),
    (r"TensorBackendMetaRegistry", "`TensorBackendMetaRegistry`", "serialization of backend metadata"),
    (r"gen_backend_stubs", "torchgen `gen_backend_stubs`", "generated structured registrations"),
    (r"rename_privateuse1_backend", "`torch.utils.rename_privateuse1_backend`", "the device's name"),
    (r"_register_device_module", "`torch._register_device_module`", "the `torch.openreg` module"),
    (r"generate_methods_for_privateuse1_backend", "`torch.utils.generate_methods_for_privateuse1_backend`", "`Tensor.openreg()` and friends"),
    (r"torch\.library\.register_fake", "`torch.library.register_fake`", "a custom operator's meta kernel"),
    (r"torch\.library\.register_autograd", "`torch.library.register_autograd`", "a custom operator's backward"),
    (r"\"torch\.backends\"", "entry point group `torch.backends`", "autoload at `import torch`"),
    (r"torch_dynamo_backends", "entry point group `torch_dynamo_backends`", "the `openreg` Dynamo backend"),
    (r"def _inductor_backend_init", "`torch.openreg._inductor_backend_init`", "Inductor's vendor hook"),
    (r"register_backend_for_device\(", "`torch._inductor.codegen.common.register_backend_for_device`", "Inductor's code generation for the device"),
    (r"register_device_op_overrides\(", "`torch._inductor.codegen.common.register_device_op_overrides`", "the device snippets of Inductor's wrapper"),
    (r"Backend\.register_backend\(", "`torch.distributed.Backend.register_backend`", "the `occl` c10d backend"),
    (r"register_interface_for_device", "`torch._dynamo.device_interface.register_interface_for_device`", "the Dynamo device interface"),
]

DISPATCH_KEYS = {
    "PrivateUse1": "device kernels and the fallback",
    "AutogradPrivateUse1": "autograd of openreg tensors (C++ autograd functions)",
    "AutocastPrivateUse1": "casting policies inside `torch.autocast(\"openreg\")`",
    "QuantizedPrivateUse1": "quantized tensors on the device",
    "Negative": "negative views (fallthrough for copies)",
    "Conjugate": "conjugate views (fallthrough for copies)",
}


def chapter(path: str):
    for pattern, page, title in CHAPTERS:
        if fnmatch.fnmatch(path, pattern):  # `*` crosses folders
            return page, title
    raise SystemExit(f"book-tests/reference.py: {path} has no chapter in CHAPTERS")


def link(path: str) -> str:
    page, title = chapter(path)
    return f"[{title}]({page})"


def sources(*patterns):
    return sorted(p for pat in patterns for p in ROOT.glob(pat) if p.is_file())


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def overrides(text: str):
    """(position, name) of each method declared `override` in a C++ file."""
    found = []
    for m in re.finditer(r"\boverride\b", text):
        j, depth = text.rfind(")", 0, m.start()), 0
        while j >= 0:
            depth += {")": 1, "(": -1}.get(text[j], 0)
            if depth == 0:
                break
            j -= 1
        found.append((m.start(), re.search(r"(~?\w+)\s*$", text[:j]).group(1)))
    return found


# `class A : public B`, `struct A::Inner : B` (a nested class defined outside its parent).
CLASS = re.compile(r"(?:struct|class)\s+((?:\w+::)*\w+)\s*(?:final\s*)?:(?!:)\s*(?:public\s+)?([\w:]+)")


def body(text: str, start: int) -> tuple:
    """The span of the `{ ... }` that opens at or after `start`."""
    open_at = text.find("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return open_at, i
    return open_at, len(text)


def interfaces() -> str:
    rows = []
    for path in sources(f"{GLUE}/runtime/*", f"{GLUE}/operators/*", f"{GLUE}/high_level/*"):
        text = path.read_text()
        classes = [(*body(text, m.end()), m.group(1), m.group(2)) for m in CLASS.finditer(text)]
        for at, method in overrides(text):
            # The innermost class whose body holds the method (a nested class ends at its `}`).
            enclosing = sorted((c for c in classes if c[0] < at < c[1]), key=lambda c: c[0])
            if not enclosing or enclosing[-1][3] == "Meta":
                continue
            _, _, ours, base = enclosing[-1]
            rows.append(f"| `{method}` | `{base}` (`{ours}`) | `{rel(path)}` | {link(rel(path))} |")
    return "| method | interface (our class) | file | chapter |\n|---|---|---|---|\n" + "\n".join(rows)


LIBRARY = re.compile(r"torch::Library::(IMPL|DEF|FRAGMENT),\s*\"(\w+)\",\s*(?:c10::DispatchKey::(\w+)|std::nullopt)")


def registrations(files) -> str:
    # Every kind of torch::Library object: (kind, namespace, dispatch key).
    libraries = {}
    for path in files:
        for kind, namespace, key in LIBRARY.findall(path.read_text()):
            libraries.setdefault((kind, namespace, key), []).append(rel(path))
    rows = []
    for (kind, namespace, key), where in sorted(libraries.items()):
        what = {"DEF": "defines operator schemas", "FRAGMENT": "more schemas of a namespace"}.get(
            kind, "the boxed fallback" if namespace == "_" and key == "PrivateUse1" else
            "fallthrough for every operator" if namespace == "_" else f"`{namespace}` kernels")
        name = f"`torch::Library({kind}, \"{namespace}\"{', ' + key if key else ''})`"
        rows.append(f"| {name} | {what} | {', '.join(f'`{w}`' for w in where)} | "
                    f"{', '.join(sorted({link(w) for w in where}))} |")
    for pattern, name, what in REGISTRATIONS:
        where = [rel(p) for p in files if re.search(pattern, p.read_text())]
        if not where:
            raise SystemExit(f"book-tests/reference.py: no file uses {name} any more")
        chapters = sorted({link(w) for w in where})
        rows.append(f"| {name} | {what} | {', '.join(f'`{w}`' for w in where)} | {', '.join(chapters)} |")
    return "| registration | registers | file | chapter |\n|---|---|---|---|\n" + "\n".join(rows)


def environment(files) -> str:
    used = {}
    for path in files:
        # Quoted names read at run time (not macros, not build-time env!() values).
        for var in re.findall(r"(?<!env!\()\"((?:OPENREG|OCCL)_[A-Z_]+)\"", path.read_text()):
            used.setdefault(var, set()).add(rel(path))
    rows = []
    for var in sorted(used):
        if var not in ENVIRONMENT:
            raise SystemExit(f"book-tests/reference.py: {var} (read in {sorted(used[var])}) has no description")
        where = sorted(used[var])
        rows.append(f"| `{var}` | {ENVIRONMENT[var]} | {', '.join(f'`{w}`' for w in where)} | "
                    f"{', '.join(sorted({link(w) for w in where}))} |")
    return "| variable | effect | read in | chapter |\n|---|---|---|---|\n" + "\n".join(rows)


def dispatch_keys(files) -> str:
    rows = []
    for key, what in DISPATCH_KEYS.items():
        where = [rel(p) for p in files if re.search(rf"DispatchKey::{key}\b|\"{key}\"", p.read_text())]
        if not where:
            raise SystemExit(f"book-tests/reference.py: DispatchKey {key} is no longer used")
        rows.append(f"| `{key}` | {what} | {', '.join(f'`{w}`' for w in where)} | "
                    f"{', '.join(sorted({link(w) for w in where}))} |")
    return "| key | used for | file | chapter |\n|---|---|---|---|\n" + "\n".join(rows)


PYTHON_API = r"""
import inspect, torch
rows = []
for prefix, module in [("torch.openreg", torch.openreg), ("torch.openreg.amp", torch.openreg.amp),
                       ("torch.openreg.profiler", torch.openreg.profiler),
                       ("torch.openreg.distributed", torch.openreg.distributed)]:
    for name in sorted(vars(module)):
        obj = getattr(module, name)
        if name.startswith("_") or inspect.ismodule(obj) or not callable(obj) or getattr(obj, "__module__", "").split(".")[0] != "torch_openreg":
            continue
        doc = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ").replace("|", "\\|")
        # A class bound in C++ (pybind11) has no source: the module that exports it stands in.
        path = inspect.getsourcefile(inspect.unwrap(obj)) or inspect.getsourcefile(module)
        rows.append(f"{prefix}.{name}\t{doc}\t{path}")
print("\n".join(rows))
"""


def python_api() -> str:
    out = subprocess.run([sys.executable, "-c", PYTHON_API], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        name, doc, path = line.split("\t")
        path = rel(Path(path).resolve())
        rows.append(f"| `{name}` | {doc or '(no docstring)'} | `{path}` | {link(path)} |")
    return "| name | what | file | chapter |\n|---|---|---|---|\n" + "\n".join(rows)


def reference() -> str:
    files = sources(f"{GLUE}/**/*.cpp", f"{GLUE}/**/*.h", f"{PACKAGE}/**/*.py", "openreg/runtime/src/**/*.rs",
                    "openreg/torch/src/**/*.rs", "openreg/python/pyproject.toml")
    files = [f for f in files if not f.name.startswith("_version")]
    for f in files:
        if not f.name.endswith(".toml"):
            chapter(rel(f))  # every file has a chapter
    return "\n\n".join([
        "### C++ interface methods\n\nEvery method the glue overrides, by interface.\n\n" + interfaces(),
        "### Registrations\n\nHow each piece reaches PyTorch.\n\n" + registrations(files),
        "### DispatchKeys\n\n" + dispatch_keys(files),
        "### Environment variables\n\n" + environment(files),
        "### The Python API of `torch.openreg`\n\n" + python_api(),
    ]) + "\n"


def inputs() -> list:
    """The files whose change makes the tables stale."""
    return [rel(p) for p in sources(f"{GLUE}/**/*", f"{PACKAGE}/**/*.py", "openreg/runtime/src/**/*.rs",
                                     "openreg/torch/src/**/*.rs", "openreg/python/pyproject.toml")] \
        + ["book-tests/reference.py"]


if __name__ == "__main__":
    print(reference())
