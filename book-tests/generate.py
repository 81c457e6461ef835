"""Produces the terminal output shown in the book (src/generated/*.txt) by running the real
commands, and records a fingerprint of each output's inputs in src/generated/fingerprints.json.
`test_generated.py` fails when an input has changed since: run `make book-outputs` then.

Usage: python book-tests/generate.py [NAME ...]   (default: all)
"""

import difflib
import functools
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "generated"
PY = sys.executable


def without_targets(text: str) -> str:
    """The benchmarks print our internal speed targets for developers; the book shows readers
    the measurements only: a `target` column, `(target ...)` notes and `targets:` lines go."""
    out, cut = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("targets:"):
            continue
        header = re.search(r"(?<=\S)(\s+)target(?=\s*$|\s+[A-Za-z])", line)
        if header and cut is None and "(target" not in line:
            cut = (header.start(), header.end())
        elif not line.strip():
            cut = None
        if cut:
            line = line[:cut[0]] + line[cut[1]:]
        line = re.sub(r"\s*\(target[^)]*\)", "", line)
        line = re.sub(r"\s+target [<>]=?.*$", "", line)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def built_module() -> Path:
    return next((ROOT / "openreg/python/torch_openreg").glob("_C*.so"))


def device_lookups() -> str:
    """The names torch's Python code looks up on torch.<device>, from the installed sources."""
    import torch

    sys.path.insert(0, str(ROOT / "book-tests"))
    import device_lookups as lookups

    return lookups.table(lookups.lookups(Path(torch.__file__).parent))


def runpath() -> str:
    text = subprocess.run(["readelf", "-d", str(built_module())], check=True,
                          capture_output=True, text=True).stdout
    lines = [" ".join(l.split()[1:]) for l in text.splitlines() if "RUNPATH" in l or "NEEDED" in l]
    return "\n".join(lines).replace(str(ROOT), "<repo>") + "\n"


def build_times() -> str:
    return subprocess.run([PY, str(ROOT / "bench/build_times.py")], check=True, cwd=ROOT,
                          capture_output=True, text=True).stdout


def reader_install() -> str:
    """`make reader` in a fresh clone: no venv, no build, no ccache. Torch's wheels come from
    pip's cache (the first download adds about 5 GB's worth of time)."""
    import time
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CARGO_TARGET_DIR")}
        env["CCACHE_DISABLE"] = "1"
        start = time.perf_counter()
        subprocess.run(["make", "reader"], cwd=clone, env=env, check=True, capture_output=True, text=True)
        minutes = (time.perf_counter() - start) / 60
        device = subprocess.run([str(clone / ".venv-reader/bin/python"), "-c",
                                 "import torch; print(torch.ones(2, device='openreg').device)"],
                                cwd=tmp, env=env, check=True, capture_output=True, text=True).stdout.strip()
    return (f"make reader in a fresh clone (no ccache; torch from pip's cache): {minutes:.1f} min\n"
            f"then: torch.ones(2, device='openreg').device == {device}\n")


def bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/bench.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    # The first line names the exact torch build; the rest is the table.
    return "\n".join(out.splitlines()[1:]) + "\n"


def operators() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/operators.py"), "--svg", str(OUT / "operators.svg")],
                         check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


def zoo_bench() -> str:
    return subprocess.run([PY, str(ROOT / "bench/zoo.py")], check=True, cwd=ROOT,
                          capture_output=True, text=True).stdout


def models_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/models.py"), "--svg", str(OUT / "models.svg")],
                         check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


def files(*patterns) -> list:
    """The repository's files matching the glob patterns, sorted (a new file counts too)."""
    return sorted(str(p.relative_to(ROOT)) for pat in patterns for p in ROOT.glob(pat) if p.is_file())


# The operator benchmark measures every kernel, the stream worker, and the allocator (a small
# operator's time is mostly its output's allocation).
KERNELS = files("openreg/torch/src/operators/kernels*.rs", "openreg/torch/src/operators/kernels/*.rs",
                "openreg/torch/csrc/operators/*", "openreg/runtime/src/stream.rs",
                "openreg/torch/src/runtime/allocator.rs")

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402


# ANCHOR: conformance
CHECKS = {  # test name: what it checks
    "test_errors": "error inputs: CPU's exception and message",
    "test_out": "out=: values, strides, empty, another device, unsafe casts",
    "test_out_warning": "out= of the wrong size: resized, with the warning",
    "test_noncontiguous_samples": "non-contiguous samples, forward and backward",
    "test_compare_cpu": "every dtype CPU supports, against CPU",
    "test_backward_compare_cpu": "gradients (float32, float64), against CPU",
    "test_overlap_like_cpu": "out= and in-place operands overlapping an input",
    "test_mixed_devices": "operands on the CPU or the other device",
    "test_fake_tensors_match_the_device": "fake tensors, every operator reached",
    "test_cuda_dtypes": "dtypes only CUDA supports",
}


def conformance() -> str:
    """Runs the conformance suite and counts, per check, the op_db entries by outcome."""
    import xml.etree.ElementTree as ET
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        run = subprocess.run([PY, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "-W", "ignore",
                              f"--junitxml={report}", "openreg/python/tests/test_conformance.py"],
                             cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(run.stdout[-3000:] + run.stderr[-3000:])
        cases = ET.parse(report).getroot().iter("testcase")
        counts = {check: {"passed": 0, "expected to fail": 0, "skipped": 0} for check in CHECKS}
        skips = {}  # reason -> {check: entries}
        for case in cases:
            name = case.get("name")
            check = next((c for c in sorted(CHECKS, key=len, reverse=True) if name.startswith(c + "_")), None)
            if check is None:
                continue
            skipped = case.find("skipped")
            outcome = ("expected to fail" if skipped is not None and "xfail" in (skipped.get("type") or "")
                       else "skipped" if skipped is not None else "passed")
            counts[check][outcome] += 1
            if outcome == "skipped":
                reason = (skipped.get("message") or "").strip()
                if reason in ("Skipped!", ""):  # op_db's DecorateInfo(unittest.skip("Skipped!"), ...)
                    reason = "op_db's own skip of the entry for this test, on CPU as here"
                skips.setdefault(reason, {}).setdefault(check, 0)
                skips[reason][check] += 1
    sys.path.insert(0, str(ROOT / "openreg/python/tests"))
    import test_conformance as suite
    width = max(map(len, CHECKS.values()))
    lines = [f"{'check':<{width}}  passed  PyTorch's expected failures  skipped"]
    for check, label in CHECKS.items():
        c = counts[check]
        lines.append(f"{label:<{width}}  {c['passed']:>6}  {c['expected to fail']:>27}  {c['skipped']:>7}")
    lines += ["", "pytest: " + re.sub(r" in [\d.]+s.*", "", run.stdout.strip().splitlines()[-1].strip("= ")), "",
              "skips, by the reason the test gives (entries per test):"]
    for reason, by_check in sorted(skips.items(), key=lambda kv: -sum(kv[1].values())):
        where = "; ".join(f"{n} {label}" for label, n in sorted(by_check.items(), key=lambda kv: -kv[1]))
        lines.append(f"  {reason[:150]}: {where}")
    lines += ["", "exclusions and their reasons:"]
    reasons = {}
    for (name, test), why in suite.EXCLUDED.items():
        reasons.setdefault(why, set()).add(name)
    for why, names in sorted(reasons.items()):
        lines.append(f"  {len(names)} entries: {why}")
    lines.append(f"  samples with dropout (random) of: {', '.join(sorted(suite.RANDOM_SAMPLES))}")
    for (name, dtype), (tolerance, why) in sorted(suite.BACKWARD_TOLERANCES.items(), key=lambda kv: kv[0][0]):
        lines.append(f"  {name} gradients, {str(dtype).removeprefix('torch.')}, {tolerance}: {why}")
    for name, (_, why) in sorted(suite.MIXED_DEVICES_ALLOWED.items()):
        lines.append(f"  {name}, operands on the CPU allowed: {why}")
    for op, why in suite.FAKE_IGNORED.items():
        lines.append(f"  {op} in the fake-tensor check: {why}")
    for (name, test), why in sorted(suite.PASSES_WHERE_PYTORCH_EXPECTS_FAILURE.items()):
        lines.append(f"  {name} {test}, PyTorch's expected failure dropped: {why}")
    computed = sorted({name for name, _ in suite.CUDA_DTYPES_COMPUTED})
    lines.append(f"  CUDA-only dtypes computed by {len(computed)} entries: {', '.join(computed)}; "
                 "the others refused with an error naming openreg or the dtype")
    return "\n".join(lines) + "\n"
# ANCHOR_END: conformance


def profiler_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/profiler.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


def memory_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/memory.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


def memory_snapshot() -> str:
    return subprocess.run([PY, str(ROOT / "book-tests/memory_picture.py"), str(OUT)],
                          check=True, cwd=ROOT, capture_output=True, text=True).stdout


def graphs_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/graphs.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


def distributed_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/distributed.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return out.strip("\n") + "\n"


COMPILE_CODE = r"""
import re, torch
from torch._inductor.utils import run_and_get_code

def f(x, w, b):
    return torch.nn.functional.gelu(x * w + b).sum(-1)

x, w, b = torch.randn(64, 128, device="openreg"), torch.randn(128, device="openreg"), torch.randn(128, device="openreg")
_, (code, *_) = run_and_get_code(torch.compile(f), x, w, b)
lines = code.splitlines()
start = next(i for i, l in enumerate(lines) if "CompiledKernel([" in l)
first = next(i for i in range(start, len(lines)) if 'extern "C"' in lines[i])
signature = []
for l in lines[first:]:
    signature.append(l.strip())
    if ")" in l:
        break
signature = " ".join(" ".join(signature).split())
body = lines[next(i for i, l in enumerate(lines) if l.strip().startswith("def call(self, args)")):]
body = body[:next(i for i, l in enumerate(body) if l.startswith("runner = "))]
print(lines[start])
print("    ...")
print(signature)
print("    ...  (the C++ loop nest, vectorised)")
print()
print("\n".join(l for l in body if l.strip()))
"""


def compile_code() -> str:
    with tempfile.TemporaryDirectory() as cache:
        return subprocess.run([PY, "-c", COMPILE_CODE], check=True, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}).stdout


def compile_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/compile.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return "\n".join(out.splitlines()[1:]) + "\n"


AOTI_CODE = r"""
import re, sys, tempfile, zipfile
import torch
sys.path.insert(0, "openreg/cpp")
import build_example

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("openreg").eval()
x = torch.randn(3, 8, device="openreg")
program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
directory = tempfile.mkdtemp()
path = torch._inductor.aoti_compile_and_package(program, package_path=f"{directory}/mlp.pt2")
with zipfile.ZipFile(path) as archive:
    read = lambda suffix: archive.read(next(n for n in archive.namelist() if n.endswith(suffix))).decode()
    wrapper, kernels = read(".wrapper.cpp"), read(".kernel.cpp")

def block(text, start, end):
    lines = text.splitlines()
    first = next(i for i, l in enumerate(lines) if start in l)
    last = next(i for i in range(first, len(lines)) if end in lines[i])
    return [l for l in lines[first:last + 1] if l.strip()]

print("// The model's constructor: a CPU model to torch's runtime, then told its device")
constructor = block(wrapper, "AOTInductorModel::AOTInductorModel(std::shared_ptr", "constants_info_[0].device_type")
print("\n".join(constructor))
print("    ...")
print()
print("// run_impl: the inference step")
run = block(wrapper, "void AOTInductorModel::run_impl(", "} // AOTInductorModel::run_impl")
code = [re.sub(r"\s*//.*$", "", l) for l in run]  # the comments go; the code stays
print("\n".join(l for l in code if l.strip()))
print()
print("// kernel.cpp: a kernel's entry point (the exception barrier)")
entry = block(kernels, 'extern "C" int cpp_fused', "catch (const std::exception& e)")
print("\n".join(entry))
print("  ...")
print()
torch.save([torch.randn(5, 8)], f"{directory}/inputs.pt")
binary = build_example.build("run_package")
import subprocess
subprocess.run([str(binary), path, f"{directory}/inputs.pt", f"{directory}/outputs.pt"], check=True, env={"PATH": "/usr/bin:/bin"})
(out,) = torch.load(f"{directory}/outputs.pt")
(inputs,) = torch.load(f"{directory}/inputs.pt")
print("// run_package (C++, no Python) on a batch of 5: matches eager openreg:",
      torch.allclose(out, model(inputs.to("openreg")).detach().cpu(), atol=1e-6))
"""


def aoti_code() -> str:
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([PY, "-c", AOTI_CODE], check=True, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}).stdout
    # The kernels' names end in a hash of the graph: keep the names, drop nothing else.
    return out


def aoti_bench() -> str:
    out = subprocess.run([PY, str(ROOT / "bench/aoti.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    return out.strip("\n") + "\n"


def profiler_trace() -> str:
    return subprocess.run([PY, str(ROOT / "book-tests/trace_picture.py"), str(OUT / "profiler-trace.svg")],
                          check=True, cwd=ROOT, capture_output=True, text=True).stdout


# Chapter crates in the order of the book; each one's chapter shows what it adds.
STAGES = ["device", "hooks", "runtime", "autoload", "operators", "amp", "compile"]


def crate_files(stage) -> list:
    """The crate's files as the diff shows them (its README describes, the diff shows code)."""
    crate = ROOT / "listings" / stage
    return sorted(str(p.relative_to(crate)) for p in crate.rglob("*")
                  if p.is_file() and p.name != "README.md"
                  and p.suffix != ".so" and p.name != "Cargo.lock"
                  and not {"target", "__pycache__"} & set(p.relative_to(crate).parts))


def lines(path) -> list:
    """A file's lines without the book's anchor markers."""
    return [l for l in path.read_text().splitlines(keepends=True) if "ANCHOR" not in l]


def crate_diff(before, after) -> str:
    """A unified diff from listings/<before> to listings/<after>, file by file."""
    old, new = crate_files(before), crate_files(after)
    out = []
    for name in sorted(set(old) | set(new)):
        a = lines(ROOT / "listings" / before / name) if name in old else []
        b = lines(ROOT / "listings" / after / name) if name in new else []
        out.extend(difflib.unified_diff(a, b, f"{before}/{name}" if a else "/dev/null",
                                        f"{after}/{name}" if b else "/dev/null", n=2))
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def crate_diffs() -> dict:
    diffs = {}
    for before, after in zip(STAGES, STAGES[1:]):
        inputs = [f"listings/{st}/{f}" for st in (before, after) for f in crate_files(st)]
        diffs[f"diff-{after}"] = (functools.partial(crate_diff, before, after),
                                  [*inputs])
    return diffs


# ANCHOR: outputs
# name -> (producer, the files whose change makes the shown output stale)
OUTPUTS = {
    # `make reader` runs the Makefile's reader target alone: the rest of the Makefile (setup,
    # the test loop) does not change what it builds.
    "reader-install": (reader_install, ["Makefile:reader", "openreg/python/Cargo.toml", "openreg/torch/Cargo.toml",
                                        "openreg/torch/build.rs", "openreg/torch-build/src/lib.rs", "Cargo.toml"]),
    "device-lookups": (device_lookups, ["book-tests/device_lookups.py", "requirements.txt"]),
    "runpath": (runpath, ["openreg/python/build.rs", "openreg/torch/build.rs",
                          "openreg/torch-build/src/lib.rs"]),
    "bench": (bench, ["bench/bench.py", "openreg/runtime/src/copy.rs", "openreg/runtime/src/memory.rs",
                      "openreg/torch/src/runtime/allocator.rs", "openreg/torch/src/runtime/host_allocator.rs",
                      "openreg/torch/src/runtime/copy.rs"]),
    "operators": (operators, ["bench/operators.py", *KERNELS]),
    "models-bench": (models_bench, ["bench/models.py", *KERNELS]),
    "zoo-bench": (zoo_bench, ["bench/zoo.py", "openreg/python/tests/test_zoo.py", *KERNELS,
                              "requirements.txt"]),
    "build-times": (build_times, ["bench/build_times.py", "openreg/torch/build.rs",
                                  "openreg/torch-build/src/lib.rs", "Cargo.toml",
                                  ".cargo/config.toml"]),
    "profiler-trace": (profiler_trace, ["book-tests/trace_picture.py", "openreg/runtime/src/trace.rs",
                                        "openreg/runtime/src/stream.rs", "openreg/torch/csrc/runtime/ActivityProfiler.cpp"]),
    "profiler-bench": (profiler_bench, ["bench/profiler.py", "bench/operators.py", "openreg/runtime/src/trace.rs",
                                        "openreg/runtime/src/stream.rs", "openreg/torch/csrc/runtime/Profiler.cpp",
                                        "openreg/torch/csrc/runtime/ActivityProfiler.cpp"]),
    "memory-bench": (memory_bench, ["bench/memory.py", "bench/zoo.py", "openreg/python/tests/test_zoo.py",
                                    "openreg/torch/src/runtime/allocator/history.rs",
                                    "openreg/torch/csrc/runtime/DeviceAllocator.cpp", *KERNELS]),
    "memory-snapshot": (memory_snapshot, ["book-tests/memory_picture.py", "openreg/python/tests/test_zoo.py",
                                          "openreg/torch/src/runtime/allocator/history.rs",
                                          "openreg/python/src/memory.rs"]),
    "graphs-bench": (graphs_bench, ["bench/graphs.py", "openreg/runtime/src/graph.rs", "openreg/runtime/src/stream.rs",
                                    "openreg/torch/csrc/runtime/Graph.cpp", *KERNELS]),
    "compile-code": (compile_code, ["openreg/python/torch_openreg/openreg/_inductor.py",
                                    "openreg/python/torch_openreg/openreg/_dynamo.py"]),
    "compile-bench": (compile_bench, ["bench/compile.py", "openreg/python/torch_openreg/openreg/_inductor.py",
                                      "openreg/torch/src/high_level/compiled.rs", *KERNELS]),
    "aoti-code": (aoti_code, ["openreg/python/torch_openreg/openreg/_aoti.py",
                              "openreg/python/torch_openreg/openreg/_inductor.py",
                              "openreg/python/torch_openreg/include/openreg_aoti.h",
                              "openreg/cpp/examples/run_package.cpp"]),
    "aoti-bench": (aoti_bench, ["bench/aoti.py", "bench/compile.py", "openreg/python/torch_openreg/openreg/_aoti.py",
                                "openreg/python/torch_openreg/openreg/_inductor.py",
                                "openreg/python/torch_openreg/include/openreg_aoti.h",
                                "openreg/torch/csrc/high_level/AOTInductor.cpp",
                                "openreg/torch/src/high_level/compiled.rs", *KERNELS]),
    "distributed-bench": (distributed_bench, ["bench/distributed.py", "openreg/runtime/src/comm/mod.rs",
                                              "openreg/runtime/src/comm/transport.rs",
                                              "openreg/runtime/src/comm/reduce.rs",
                                              "openreg/runtime/src/comm/shm.rs",
                                              "openreg/torch/csrc/high_level/ProcessGroupOCCL.cpp",
                                              "openreg/torch/src/high_level/distributed.rs",
                                              "openreg/python/torch_openreg/openreg/distributed.py"]),
    "reference": (reference.reference, [*reference.inputs()]),
    "conformance": (conformance, ["openreg/python/tests/test_conformance.py", *KERNELS]),
    **crate_diffs(),
}
# ANCHOR_END: outputs


def fingerprint(inputs, producer=None) -> str:
    """The inputs' bytes, plus the source of the function that turns them into the output: a
    change to one generator leaves the other outputs fresh."""
    digest = hashlib.sha256()
    if producer is not None:
        for function in (getattr(producer, "func", producer), without_targets):
            digest.update(inspect.getsource(function).encode())
    for name in inputs:
        digest.update(name.encode())
        digest.update(input_bytes(name))
    return digest.hexdigest()[:16]


def input_bytes(name: str) -> bytes:
    """A file's bytes, or with `path:anchor` the lines of one ANCHOR section of it."""
    path, _, anchor = name.partition(":")
    data = (ROOT / path).read_bytes()
    if not anchor:
        return data
    start, end = f"ANCHOR: {anchor}\n".encode(), f"ANCHOR_END: {anchor}".encode()
    if start not in data or end not in data:
        raise ValueError(f"{path} has no ANCHOR: {anchor} ... ANCHOR_END: {anchor} section (input {name!r})")
    return data.split(start, 1)[1].split(end, 1)[0]


def main(names):
    OUT.mkdir(parents=True, exist_ok=True)
    prints_file = OUT / "fingerprints.json"
    prints = json.loads(prints_file.read_text()) if prints_file.exists() else {}
    for name in names or OUTPUTS:
        produce, inputs = OUTPUTS[name]
        (OUT / f"{name}.txt").write_text(without_targets(produce()))
        prints[name] = fingerprint(inputs, produce)
        print(f"wrote src/generated/{name}.txt")
    prints_file.write_text(json.dumps(prints, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
