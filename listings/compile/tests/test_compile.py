"""torch.compile on the device: every backend against eager CPU over the kernels' correctness
matrix (layouts, dtypes, both devices), training, the generated code, and, for each piece of
torch_openreg/compile.py, the error a backend without it meets."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from test_kernels import DEVICES, LAYOUTS, inputs, on


def chain(a, b):
    """Pointwise operators and a reduction: one fused kernel for Inductor."""
    return (a * b + a.abs()).softmax(-1) if a.dim() else a * b + a.abs()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_inductor_matches_eager_cpu(layout, dtype, device):
    a, b = inputs(layout, dtype)
    got = torch.compile(chain, fullgraph=True)(on(a, device), on(b, device))
    assert got.device == torch.device(device), "outputs are allocated on the inputs' device"
    expected = chain(a.float(), b.float()).to(dtype)
    torch.testing.assert_close(got.cpu(), expected, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "zero_dim", "empty"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "openreg"])
def test_other_backends_match_eager_cpu(backend, layout, device):
    a, b = inputs(layout, torch.float32)
    got = torch.compile(chain, backend=backend, fullgraph=True)(on(a, device), on(b, device))
    assert got.device == torch.device(device)
    torch.testing.assert_close(got.cpu(), chain(a, b))


def test_integer_inputs():
    a, b = inputs("odd", torch.int64)
    f = torch.compile(lambda x, y: (x * y + x.abs()) // 3)
    torch.testing.assert_close(f(a.openreg(), b.openreg()).cpu(), (a * b + a.abs()) // 3)


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
def test_generated_code_is_one_fused_kernel_on_the_inputs_device():
    x, y = torch.randn(4, 8, device="openreg:1"), torch.randn(4, 8, device="openreg:1")
    out, (code,) = run_and_get_code(torch.compile(chain), x, y)
    assert code.count("async_compile.cpp_pybinding(") == 1
    assert "launch(cpp_fused_" in code, "the kernel is launched with the runtime's views, not device addresses"
    assert "device='openreg:1'" in code and "device='openreg'," not in code
    assert out.device == torch.device("openreg:1")
# ANCHOR_END: generated


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
# Each piece of torch_openreg/compile.py, removed before anything compiles, and the error
# torch.compile then raises.
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
    "kernel-call override": (
        "common.register_backend_for_device = "
        "lambda device, scheduling, wrapper, *rest: register(device, scheduling, PythonWrapperCodegen, *rest)",
        "RuntimeError: device openreg nyi"),
    "is_cpu patch": (
        "c.is_cpu = lambda node: node.get_device().type == 'cpu'",
        "TypeError: can't multiply sequence by non-int of type 'tuple'"),
    "kernel language patch": (
        "c.kernel_language = lambda get_current_backend: get_current_backend",
        "AssertionError: expected scalar_var.dtype is not None"),
}
# ANCHOR_END: missing


@pytest.mark.parametrize("piece", MISSING)
def test_each_missing_piece_has_its_error(piece):
    remove, error = MISSING[piece]
    result = run(f"""
        import torch
        import torch_openreg.compile as c
        if "common." in {remove!r}:
            import torch._inductor.codegen.common as common
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen
            register = common.register_backend_for_device
        {remove}
        x, y = torch.randn(4, 1, device="openreg").half(), torch.randn(1, 8, device="openreg").half()
        torch.compile(lambda x, y: (x * y + x.abs()).softmax(-1).sum(0))(x, y)
    """)
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
