"""torch.compile on the device: every backend against eager CPU over the kernels' correctness
matrix (layouts, dtypes, out=, both devices), training, dynamic shapes, the generated Triton
code, eager's exception classes, and, for each piece of the backend, the error a backend
without it meets."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from test_kernels import DEVICES, LAYOUTS, inputs, on


def chain(a, b):
    """Pointwise operators with a math function (libdevice's), and a reduction: one fused kernel."""
    if not a.dtype.is_floating_point:
        return (a * b + a.abs()) // 3
    y = torch.tanh(a * b) + a.abs()
    return y.softmax(-1) if y.dim() else y


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_inductor_matches_eager_cpu(layout, dtype, device):
    a, b = inputs(layout, dtype)
    got = torch.compile(chain, fullgraph=True)(on(a, device), on(b, device))
    assert got.device == torch.device(device), "outputs are allocated on the inputs' device"
    expected = chain(a.float(), b.float()).to(dtype) if dtype.is_floating_point else chain(a, b)
    torch.testing.assert_close(got.cpu(), expected, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "zero_dim", "empty"])
def test_out_argument(layout):
    a, b = inputs(layout, torch.float32)
    out = torch.empty(0, device="openreg")
    result = torch.compile(lambda x, y, out: torch.mul(torch.exp(x), y, out=out))(on(a, "openreg"), on(b, "openreg"), out)
    assert result is out
    torch.testing.assert_close(out.cpu(), torch.exp(a) * b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "zero_dim", "empty"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "openreg"])
def test_other_backends_match_eager_cpu(backend, layout, device):
    a, b = inputs(layout, torch.float32)
    got = torch.compile(chain, backend=backend, fullgraph=True)(on(a, device), on(b, device))
    assert got.device == torch.device(device)
    torch.testing.assert_close(got.cpu(), chain(a, b))


@pytest.mark.parametrize("backend", ["inductor", "aot_eager", "openreg"])
# Eager mse_loss runs CPU's mse_loss.out through the fallback, which warns about its own
# output (tests/test_fallback.py shows CPU does the same).
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_training_matches_eager_cpu(backend):
    def train(device, compile):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)).to(device)
        step = torch.compile(model, backend=backend) if compile else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(32, 6).to(device), torch.randn(32, 3).to(device)
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(step(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for got, expected in zip(train("openreg", True), train("cpu", False)):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


# ANCHOR: generated
def test_generated_code_is_a_triton_kernel_launched_on_the_stream():
    x, y = torch.randn(4, 8, device="openreg:1"), torch.randn(4, 8, device="openreg:1")
    out, (code,) = run_and_get_code(torch.compile(chain), x, y)
    assert code.count("@triton.jit") == 1, "one fused kernel"
    assert "DeviceProperties(type='openreg', index=1" in code
    assert "from torch_openreg.inductor_backend import get_raw_stream" in code
    assert "stream=stream1" in code or "stream=raw_stream1" in code, "launched with the device's stream"
    assert "from openreg_triton import libdevice" in code
    assert "device='openreg:1'" in code and "device='openreg'," not in code
    assert out.device == torch.device("openreg:1")
# ANCHOR_END: generated


# ANCHOR: registration
def test_registration_is_inductors_triton_path():
    import triton
    from torch._inductor.codegen.common import (
        get_device_op_overrides, get_scheduling_for_device, get_wrapper_codegen_for_device)
    from torch._inductor.codegen.triton import TritonScheduling
    from triton.runtime import driver

    torch.compile(chain)(*(torch.randn(3, device="openreg") for _ in range(2)))
    from torch_openreg.inductor_backend import OpenRegDeviceOpOverrides, OpenRegWrapperCodegen

    assert get_scheduling_for_device("openreg") is TritonScheduling
    assert get_wrapper_codegen_for_device("openreg") is OpenRegWrapperCodegen
    assert isinstance(get_device_op_overrides("openreg"), OpenRegDeviceOpOverrides)
    assert "openreg" in triton.backends.backends and type(driver.active).__name__ == "OpenRegDriver"
    with torch.openreg.device(1):
        assert driver.active.get_current_device() == 1
        assert driver.active.get_current_stream(1) == torch.accelerator.current_stream(1).stream_id
# ANCHOR_END: registration


def test_an_index_out_of_bounds_raises_what_eager_raises():
    x, index = torch.randn(5, device="openreg"), torch.tensor([0, 7], device="openreg")
    with pytest.raises(IndexError):
        x[index]
        torch.openreg.synchronize()
    with pytest.raises(IndexError, match="index out of bounds"):
        torch.compile(lambda x, i: x[i] * 2)(x, index)
        torch.openreg.synchronize()
    torch.testing.assert_close(torch.compile(lambda x, i: x[i] * 2)(x, index[:1]).cpu(), x.cpu()[:1] * 2)


def test_inputs_on_two_devices_raise_what_eager_raises():
    x, y = torch.randn(4, device="openreg:0"), torch.randn(4, device="openreg:1")
    with pytest.raises(RuntimeError, match="same device"):
        x + y
    with pytest.raises(RuntimeError, match="same device"):
        torch.compile(lambda x, y: x * 2 + y)(x, y)


def test_dynamic_shapes_compile_once():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(chain, backend=counter, dynamic=True)
    for n in (3, 5, 17):
        a, b = torch.randn(n, 7), torch.randn(n, 7)
        torch.testing.assert_close(f(a.openreg(), b.openreg()).cpu(), chain(a, b))
    assert counter.frame_count == 1


def test_device_properties():
    props = torch.openreg.get_device_properties(1)
    assert props.multi_processor_count >= 1 and props.name == "OpenReg 1"
    assert torch.openreg.get_device_properties("openreg:0").name == "OpenReg 0"
    with pytest.raises(ValueError, match="openreg device index 2 out of range"):
        torch.openreg.get_device_properties(2)


def run(script: str) -> subprocess.CompletedProcess:
    """A fresh process with Inductor's caches off: what it compiles, it compiles now."""
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    # -P: the installed package, not the source directory the tests run in.
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_import_torch_does_not_import_dynamo():
    # Autoload imports this package at `import torch`: registration must not cost every
    # program Dynamo's import.
    result = run("""
        import sys, torch
        assert torch.openreg.device_count() == 2
        assert "torch._dynamo" not in sys.modules, "importing the backend imported Dynamo"
        assert "triton" not in sys.modules, "importing the backend imported Triton"
    """)
    assert result.returncode == 0, result.stderr[-3000:]


# ANCHOR: nothing_registered
def test_eager_and_aot_eager_need_nothing_registered():
    result = run("""
        import torch
        import torch_openreg.compile as c
        c.register_interface = lambda: None        # no device interface
        del torch.openreg._inductor_backend_init    # no Inductor backend
        x = torch.randn(4, 8, device="openreg")
        for backend in ["eager", "aot_eager"]:
            torch.testing.assert_close(torch.compile(torch.sin, backend=backend)(x).cpu(), x.cpu().sin())
        from torch._dynamo.device_interface import get_interface_for_device
        get_interface_for_device("openreg")
    """)
    assert "NotImplementedError: No interface for device openreg" in result.stderr, result.stderr
# ANCHOR_END: nothing_registered


# ANCHOR: missing
# Each piece of the backend, removed before anything compiles, and the error torch.compile then
# raises. A third element is the script to run instead of the default (a float16 chain with a
# math function, a broadcast and a reduction).
INDEX = """
x, i = torch.randn(5, device="openreg"), torch.tensor([0, 7], device="openreg")
torch.compile(lambda x, i: x[i] * 2)(x, i)
"""
MISSING = {
    "device interface": (
        "c.register_interface = lambda: None",
        "NotImplementedError: No interface for device openreg"),
    "multi_processor_count": (
        "torch.openreg.get_device_properties = lambda device=None: object()",
        "must override get_multi_processor_count"),
    "_inductor_backend_init": (
        "del torch.openreg._inductor_backend_init",
        "AssertionError: no scheduling registered for device openreg"),
    "device op overrides": (
        "common.register_device_op_overrides = lambda device, overrides: None",
        "KeyError: 'openreg'"),
    "Triton backend plugin": (
        "import triton.backends; triton.backends.backends.pop('openreg')",
        "RuntimeError: 0 active drivers ([]). There should only be one."),
    "TRITON_INTERPRET before triton loads": (
        "import triton; os.environ['TRITON_INTERPRET'] = '1'",
        "RuntimeError: openreg's Triton kernels run in Triton's interpreter"),
    "libdevice for the interpreter": (
        "ib.OpenRegWrapperCodegen.define_kernel = PythonWrapperCodegen.define_kernel",
        "InterpreterError: AttributeError(\"'NoneType' object has no attribute 'dtype'\")"),
    "InterpretedKernel": (
        "ib.InterpretedKernel = lambda kernel: kernel",
        "InterpreterError: AssertionError('index out of bounds: 0 <= tmp4 < 5')", INDEX),
}
# ANCHOR_END: missing


@pytest.mark.parametrize("piece", MISSING)
def test_each_missing_piece_has_its_error(piece):
    remove, error, *script = MISSING[piece]
    script = script[0] if script else """
x, y = torch.randn(4, 1, device="openreg").half(), torch.randn(1, 8, device="openreg").half()
torch.compile(lambda x, y: (torch.tanh(x * y) + x.abs()).softmax(-1).sum(0))(x, y)
"""
    # TRITON_INTERPRET=0 in the environment: the package keeps a value it finds there.
    preamble = "import os\nos.environ['TRITON_INTERPRET'] = '0'\n" if "TRITON_INTERPRET" in piece else ""
    result = run(preamble + "import torch\nimport torch_openreg.compile as c\n" + (
        "import torch._inductor.codegen.common as common\n" if "common." in remove else "") + (
        "import torch_openreg.inductor_backend as ib\n"
        "from torch._inductor.codegen.wrapper import PythonWrapperCodegen\n" if "ib." in remove else "")
        + remove + "\n" + script)
    assert result.returncode != 0 and error in result.stderr, result.stderr[-3000:]


def test_the_complete_backend_compiles_in_a_fresh_process():
    # The control for the test above: the same script with nothing removed.
    result = run("""
        import torch
        x, y = torch.randn(4, 1, device="openreg").half(), torch.randn(1, 8, device="openreg").half()
        got = torch.compile(lambda x, y: (x * y + x.abs()).softmax(-1).sum(0))(x, y)
        x, y = x.cpu().float(), y.cpu().float()
        torch.testing.assert_close(got.cpu(), (x * y + x.abs()).softmax(-1).sum(0).half())
    """)
    assert result.returncode == 0, result.stderr[-3000:]
