"""openreg::custom_abs: schema and device kernel from C++ (the kernel in Rust, queued on the
current stream), Meta kernel and autograd from Python."""

import pytest
import torch


def test_matches_abs_on_both_devices_and_many_shapes():
    for device in ["openreg:0", "openreg:1"]:
        for shape in [(0,), (), (7,), (3, 5), (1 << 18,)]:
            x = torch.randn(shape)
            got = torch.ops.openreg.custom_abs(x.to(device))
            assert got.device == torch.device(device)
            assert torch.equal(got.cpu(), x.abs())
    t = torch.randn(4, 6).to("openreg").t()  # non-contiguous input
    assert torch.equal(torch.ops.openreg.custom_abs(t).cpu(), t.cpu().abs())


def test_runs_on_the_current_stream():
    x = torch.randn(1 << 20, device="openreg")
    s = torch.Stream(device="openreg")
    with s:
        torch.openreg._sleep(100)
        y = torch.ops.openreg.custom_abs(x)
        assert not s.query(), "queued behind the sleep"
        assert torch.equal(y.cpu(), x.cpu().abs())  # .cpu() waits for the current stream, s
    # As with CUDA, another stream sees the result only after waiting for s.
    torch.accelerator.current_stream().wait_stream(s)


def test_autograd():
    x = torch.tensor([-2.0, 0.5, 3.0], device="openreg", requires_grad=True)
    torch.ops.openreg.custom_abs(x).sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0, 1.0]


def test_meta_kernel_gives_shapes_without_the_device():
    m = torch.ops.openreg.custom_abs(torch.empty(2, 3, device="meta"))
    assert m.shape == (2, 3) and m.device.type == "meta"


def test_opcheck():
    x = torch.randn(5, device="openreg", requires_grad=True)
    # opcheck's test_autograd_registration supports only CPU/CUDA/XPU tensors in torch 2.15
    # ("NYI devices other than CPU/CUDA/XPU"); test_autograd above checks the gradient.
    torch.library.opcheck(torch.ops.openreg.custom_abs, (x,), test_utils=("test_schema", "test_faketensor"))


def test_other_dtypes_are_a_clear_error():
    with pytest.raises(TypeError, match="openreg::custom_abs supports float32 tensors, got Long"):
        torch.ops.openreg.custom_abs(torch.arange(3, device="openreg"))


@pytest.mark.parametrize("name", ["custom_autograd_fn_returns_self", "custom_autograd_fn_aliasing"])
def test_cpp_autograd_functions(name):
    op = getattr(torch.ops.openreg, name)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"openreg::{name}", "AutogradPrivateUse1")
    x = torch.randn(4, device="openreg", requires_grad=True)
    y = op(x)
    assert y.data_ptr() == x.data_ptr(), "returns the input (or a view of it), no copy"
    (y * 3).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((4,), 1.5))  # the custom backward halves 3


# ANCHOR: opcheck
def test_every_openreg_operator_passes_opcheck_and_compiles_without_a_graph_break():
    names = sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("openreg::"))
    assert names, "no openreg:: operators registered"
    x = torch.randn(3, 4, device="openreg", requires_grad=True)
    for name in names:
        op = getattr(torch.ops.openreg, name).default
        # opcheck's autograd-registration check supports only CPU, CUDA and XPU devices
        # (torch 2.15); schema, FakeTensor and AOT-dispatch checks run on ours.
        results = torch.library.opcheck(op, (x,), test_utils=("test_schema", "test_faketensor",
                                                             "test_aot_dispatch_dynamic"))
        assert set(results.values()) == {"SUCCESS"}, (name, results)
        compiled = torch.compile(lambda t, op=op: op(t) * 2, backend="openreg", fullgraph=True)
        torch.testing.assert_close(compiled(x).cpu(), (op(x) * 2).cpu())
# ANCHOR_END: opcheck
