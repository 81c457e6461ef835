"""AOTInductor on openreg: packages compiled from exported programs, loaded from Python and from
a C++ program with no Python (openreg/cpp/examples/run_package.cpp over libtorch_openreg.so).

Compiling a package takes seconds to tens of seconds. Each model is compiled once per session,
and its package is kept in the build tree for later runs (see `compile_package`).
"""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "openreg" / "cpp"))
import build_example  # noqa: E402


class MLP(torch.nn.Sequential):
    def __init__(self):
        super().__init__(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean((2, 3)))


class Gather(torch.nn.Module):
    """Indirect indexing: Inductor's kernel checks the indices itself."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, index):
        return self.table[index] * 2


def block():
    return torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)


# name: (model, example input (CPU), tolerance)
MODELS = {
    "mlp": (MLP, lambda batch: torch.randn(batch, 32), 1e-5),
    "cnn": (CNN, lambda batch: torch.randn(batch, 3, 16, 16), 1e-5),
    "block": (block, lambda batch: torch.randn(batch, 5, 32), 1e-4),
}


# Compiled packages are kept under a key of everything they are compiled from (the exported
# program with its weights, torch, the package's compile path, the C++ compiler), as the book's
# tests keep the chapter crates' wheels: a run with the same key loads the kept package, and a
# fresh clone (CI) compiles. Inductor's own cache does not keep AOT packages.
KEPT = ROOT / "target" / "aoti-packages"
COMPILE_PATH = sorted(p for p in (ROOT / "openreg" / "python" / "torch_openreg").rglob("*")
                      if p.is_file() and p.suffix in (".py", ".h"))


def package_key(program) -> str:
    key = hashlib.sha256(torch.__version__.encode())
    saved = io.BytesIO()
    torch.export.save(program, saved)
    key.update(saved.getvalue())
    for path in COMPILE_PATH:
        key.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    key.update(subprocess.run(["c++", "--version"], capture_output=True, check=True).stdout)
    return key.hexdigest()[:20]


def compile_package(model, example, path, dynamic=True):
    shapes = ({0: torch.export.Dim("batch", min=2, max=64)},) if dynamic else None
    program = torch.export.export(model, (example,), dynamic_shapes=shapes)
    kept = KEPT / f"{package_key(program)}.pt2"
    if kept.exists():
        shutil.copyfile(kept, path)
        return str(path)
    torch._inductor.aoti_compile_and_package(program, package_path=str(path))
    KEPT.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{os.getpid()}.tmp")  # two test workers may keep the same one
    shutil.copyfile(path, partial)
    os.replace(partial, kept)
    return str(path)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """Each model on openreg (eval mode, fixed weights) and its package."""
    directory = tmp_path_factory.mktemp("aoti")
    built = {}
    for name, (make, example, tolerance) in MODELS.items():
        torch.manual_seed(0)
        model = make().eval().to("openreg")
        built[name] = (model, compile_package(model, example(3).to("openreg"), directory / f"{name}.pt2"),
                       example, tolerance)
    return built


@pytest.fixture(scope="module")
def run_package():
    return build_example.build("run_package")


@pytest.mark.parametrize("name", list(MODELS))
def test_package_matches_eager_at_every_batch(packages, name):
    model, path, example, tolerance = packages[name]
    runner = torch._inductor.aoti_load_package(path)
    for batch in (3, 2, 17):  # the traced batch, and others (Dim; 0 and 1 are specialised)
        x = example(batch).to("openreg")
        out = runner(x)
        assert out.device == torch.device("openreg:0")
        with torch.no_grad():
            torch.testing.assert_close(out.cpu(), model(x).cpu(), atol=tolerance, rtol=tolerance)


def test_package_names_its_device_and_launches_through_the_backend(packages):
    _, path, _, _ = packages["mlp"]
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        wrapper = next(n for n in names if n.endswith(".wrapper.cpp"))
        metadata = next(n for n in names if n.endswith(".wrapper_metadata.json"))
        source = archive.read(wrapper).decode()
        assert '"AOTI_DEVICE_KEY": "openreg"' in archive.read(metadata).decode()
    # Kernels are launched on the stream (never called with device pointers), buffers come
    # from the device's allocator, matrix products go to the backend's shim.
    assert "openreg_launch(cpp_fused" in source
    assert "cached_torch_device_type_privateuse1, this->device_idx_" in source
    assert "aoti_torch_openreg_addmm_out(" in source
    assert "aoti_torch_cpu_" not in source


def test_weights_move_to_the_device_once(packages):
    model, path, example, _ = packages["mlp"]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    runner = torch._inductor.aoti_load_package(path)
    x = example(4).to("openreg")
    torch.openreg.synchronize()
    before = torch.openreg.memory_allocated()
    runner(x)
    torch.openreg.synchronize()
    after_first = torch.openreg.memory_allocated()
    runner(x)
    torch.openreg.synchronize()
    assert after_first - before >= weights  # the device copies, kept by the model
    assert torch.openreg.memory_allocated() == after_first  # not copied again
    del runner


def test_package_runs_on_the_second_device(packages):
    model, path, example, tolerance = packages["mlp"]
    runner = torch._inductor.aoti_load_package(path, device_index=1)
    x = example(2)
    out = runner(x.to("openreg:1"))
    assert out.device == torch.device("openreg:1")
    with torch.no_grad():
        torch.testing.assert_close(out.cpu(), model(x.to("openreg")).cpu(), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", list(MODELS))
def test_cpp_program_runs_the_package_without_python(packages, run_package, tmp_path, name):
    model, path, example, tolerance = packages[name]
    x = example(5)
    torch.save([x], tmp_path / "inputs.pt")
    # No Python on the path, none in the environment: the program links libtorch and
    # libtorch_openreg.so only.
    result = subprocess.run(
        [str(run_package), str(path), str(tmp_path / "inputs.pt"), str(tmp_path / "outputs.pt")],
        env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (out,) = torch.load(tmp_path / "outputs.pt")
    with torch.no_grad():
        torch.testing.assert_close(out, model(x.to("openreg")).cpu(), atol=tolerance, rtol=tolerance)


def test_cpp_program_links_no_python(run_package):
    libraries = subprocess.run(["ldd", str(run_package)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_openreg.so" in libraries
    assert "libpython" not in libraries


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    (lambda: torch.randn(3, 32), "unmatched device type"),
    (lambda: torch.randn(3, 33, device="openreg"), "unmatched dim value at 1, expected: 32"),
    (lambda: torch.randn(3, 32, device="openreg", dtype=torch.float64), "unmatched dtype"),
    (lambda: torch.randn(32, 3, device="openreg").t(), "unmatched stride value"),
    (lambda: torch.randn(65, 32, device="openreg"), "dim value is too large"),
])
def test_wrong_input_is_an_error(packages, bad, message):
    _, path, example, _ = packages["mlp"]
    runner = torch._inductor.aoti_load_package(path)
    with pytest.raises(RuntimeError, match=message):
        runner(bad())
    assert runner(example(2).to("openreg")).cpu().shape == (2, 10)  # still usable


def test_index_out_of_bounds_in_a_packaged_kernel(tmp_path):
    torch.manual_seed(0)
    model = Gather().eval().to("openreg")
    index = torch.tensor([1, 2, 3], device="openreg")
    runner = torch._inductor.aoti_load_package(compile_package(model, index, tmp_path / "g.pt2", dynamic=False))
    torch.testing.assert_close(runner(index).cpu(), model(index).detach().cpu())
    # The kernel's bounds check throws a C++ exception on the stream's worker: the stream
    # reports it, as an IndexError like eager code's, at the next synchronization.
    with pytest.raises(IndexError, match=r"index out of bounds: 0 <= tmp\d+ < 10"):
        runner(torch.tensor([1, 20, 3], device="openreg")).cpu()
    torch.testing.assert_close(runner(index).cpu(), model(index).detach().cpu())


@pytest.mark.parametrize("content", [b"not a zip file" * 10, None])
def test_corrupt_package(packages, tmp_path, content):
    _, path, _, _ = packages["mlp"]
    data = Path(path).read_bytes()
    corrupt = tmp_path / "corrupt.pt2"
    corrupt.write_bytes(content if content is not None else data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="zip archive"):
        torch._inductor.aoti_load_package(str(corrupt))


def test_corrupt_package_in_cpp(run_package, tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip file" * 10)
    torch.save([torch.randn(2, 32)], tmp_path / "inputs.pt")
    result = subprocess.run([str(run_package), str(tmp_path / "bad.pt2"), str(tmp_path / "inputs.pt"),
                             str(tmp_path / "out.pt")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "error:" in result.stderr and "zip archive" in result.stderr


def test_package_without_openreg(packages):
    """A process where torch_openreg is not loaded cannot run an openreg package."""
    _, path, _, _ = packages["mlp"]
    code = f"import torch\ntorch._inductor.aoti_load_package({str(path)!r})\n"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "RuntimeError: Unsupported device key found: openreg" in result.stderr


def test_device_index_out_of_range(packages):
    _, path, _, _ = packages["mlp"]
    with pytest.raises(ValueError, match="openreg:5.*2 openreg devices"):
        torch._inductor.aoti_load_package(path, device_index=5)
