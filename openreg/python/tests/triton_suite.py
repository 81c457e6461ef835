"""Inductor's Triton path on openreg (OPENREG_INDUCTOR=triton), run by test_inductor_triton.py
in a process of its own: Triton chooses its interpreter when it is imported, and the path must
be the only one the process registers.

Registration and the absence of patches, the generated code, the correctness matrix (layouts,
dtypes, out=, both devices), dynamic shapes, training (an MLP, and a decoder-only language model),
and errors of the classes eager code raises."""

import os
import sys

import pytest
import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code

assert os.environ.get("OPENREG_INDUCTOR") == "triton", "run through test_inductor_triton.py"

DEVICES = ["openreg:0", "openreg:1"]
LAYOUTS = {
    "contiguous": lambda: (torch.randn(4, 5), torch.randn(4, 5)),
    "broadcast": lambda: (torch.randn(4, 1), torch.randn(1, 5)),
    "transposed": lambda: (torch.randn(5, 4).t(), torch.randn(5, 4).t()),
    "mixed": lambda: (torch.randn(5, 4).t(), torch.randn(4, 5)),
    "strided": lambda: (torch.randn(4, 10)[:, ::2], torch.randn(8, 5)[::2]),
    "odd": lambda: (torch.randn(3, 7, 13), torch.randn(7, 13)),
    "wide": lambda: (torch.randn(2, 3000), torch.randn(2, 3000)),
    "zero_dim": lambda: (torch.randn(()), torch.randn(())),
    "empty": lambda: (torch.randn(0, 5), torch.randn(0, 5)),
}


def inputs(layout, dtype):
    a, b = LAYOUTS[layout]()
    if not dtype.is_floating_point:
        a, b = a * 10, b * 10
    return a.to(dtype), b.to(dtype)


def on(t, device):
    """The same values with the same strides on the device (t.to would make them dense)."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device).copy_(t)


def chain(a, b):
    """Pointwise operators with a math function, and a reduction: one fused kernel."""
    if not a.dtype.is_floating_point:
        return (a * b + a.abs()) // 3
    y = torch.tanh(a * b) + torch.erf(a) * b.abs()
    return y.softmax(-1) if y.dim() else y


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


# ANCHOR: registration
def test_registration_is_torchs_triton_path_with_no_patch():
    from torch._inductor.codegen.common import (
        get_device_op_overrides, get_scheduling_for_device, get_wrapper_codegen_for_device)
    from torch._inductor.codegen.triton import TritonScheduling

    from torch_openreg.inductor_backend import OpenRegDeviceOpOverrides, OpenRegWrapperCodegen
    from torch_openreg.openreg import _inductor

    torch.compile(chain)(*(torch.randn(3, device="openreg") for _ in range(2)))
    assert get_scheduling_for_device("openreg") is TritonScheduling
    assert get_wrapper_codegen_for_device("openreg") is OpenRegWrapperCodegen
    assert isinstance(get_device_op_overrides("openreg"), OpenRegDeviceOpOverrides)
    for patch in _inductor.PATCHES:
        owner, name = patch.owner_and_name()
        function = getattr(owner, name)
        assert not hasattr(function, "openreg_original"), f"{patch.module}.{patch.qualname} is replaced"
# ANCHOR_END: registration


def test_triton_finds_the_backend_plugin():
    import triton
    from triton.runtime import driver

    assert type(driver.active).__name__ == "OpenRegDriver"
    assert driver.active.get_current_target().backend == "openreg"
    assert driver.active.get_active_torch_device() == torch.device("openreg:0")
    with torch.openreg.device(1):
        assert driver.active.get_current_device() == 1
        assert driver.active.get_current_stream(1) == torch.accelerator.current_stream(1).native_handle
    assert "openreg" in triton.backends.backends
    from torch._dynamo.device_interface import get_interface_for_device

    assert get_interface_for_device("openreg").is_triton_capable()


# ANCHOR: generated
def test_generated_code_is_a_triton_kernel_launched_on_the_stream():
    x, y = torch.randn(4, 8, device="openreg:1"), torch.randn(4, 8, device="openreg:1")
    out, (code,) = run_and_get_code(torch.compile(chain), x, y)
    assert code.count("@triton.jit") == 1, "one fused kernel"
    assert "DeviceProperties(type='openreg', index=1" in code
    assert "from torch_openreg.inductor_backend import get_raw_stream" in code
    assert "stream=stream1" in code or "stream=raw_stream1" in code, "launched with the device's stream"
    assert "device='openreg:1'" in code
    assert "from openreg_triton import libdevice" in code
    assert out.device == torch.device("openreg:1")
# ANCHOR_END: generated


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_eager_cpu(layout, dtype, device):
    a, b = inputs(layout, dtype)
    got = torch.compile(chain, fullgraph=True)(on(a, device), on(b, device))
    assert got.device == torch.device(device)
    expected = chain(a.float(), b.float()).to(dtype) if dtype.is_floating_point else chain(a, b)
    tolerance = {} if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got.cpu(), expected, **tolerance)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "zero_dim", "empty"])
def test_out_argument(layout):
    a, b = inputs(layout, torch.float32)
    out = torch.empty(0, device="openreg")
    f = torch.compile(lambda x, y, out: torch.mul(torch.exp(x), y, out=out))
    result = f(on(a, "openreg"), on(b, "openreg"), out)
    assert result is out
    torch.testing.assert_close(out.cpu(), torch.exp(a) * b)


def test_dynamic_shapes_compile_once():
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(chain, backend=counter, dynamic=True)
    for n in (3, 5, 17):
        a, b = torch.randn(n, 7), torch.randn(n, 7)
        torch.testing.assert_close(f(a.openreg(), b.openreg()).cpu(), chain(a, b))
    assert counter.frame_count == 1


def test_training_matches_eager_cpu():
    def train(device, compile):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                    torch.nn.Linear(16, 3)).to(device)
        step = torch.compile(model) if compile else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(32, 6).to(device), torch.randn(32, 3).to(device)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(step(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for got, expected in zip(train("openreg", True), train("cpu", False)):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_decoder_only_language_model_training_step():
    import transformers

    def step(device, compile):
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        forward = torch.compile(model) if compile else model
        tokens = torch.randint(0, 97, (2, 12)).to(device)
        loss = forward(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        return loss.detach().cpu(), [p.detach().cpu() for p in model.parameters()]

    loss, params = step("openreg", True)
    expected_loss, expected = step("cpu", False)
    torch.testing.assert_close(loss, expected_loss, atol=1e-4, rtol=1e-4)
    for got, want in zip(params, expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_an_index_out_of_bounds_raises_what_eager_raises():
    x, index = torch.randn(5, device="openreg"), torch.tensor([0, 7], device="openreg")
    with pytest.raises(IndexError):
        x[index]
        torch.openreg.synchronize()
    with pytest.raises(IndexError):
        torch.compile(lambda x, i: x[i] * 2)(x, index)
        torch.openreg.synchronize()


def test_inputs_on_two_devices_raise_what_eager_raises():
    x, y = torch.randn(4, device="openreg:0"), torch.randn(4, device="openreg:1")
    with pytest.raises(RuntimeError, match="same device"):
        x + y
    with pytest.raises(RuntimeError, match="same device"):
        torch.compile(lambda x, y: x * 2 + y)(x, y)


def test_a_shape_mismatch_raises_what_eager_raises():
    x, y = torch.randn(4, device="openreg"), torch.randn(5, device="openreg")
    with pytest.raises(RuntimeError, match="must match the size"):
        x + y
    with pytest.raises(RuntimeError, match="broadcast a dimension of length 5"):  # Dynamo's words
        torch.compile(lambda x, y: torch.tanh(x + y))(x, y)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
