"""arange, integer fill_, tril and triu against CPU, over the correctness matrix: dtypes,
strided and transposed inputs, out= (empty, right-sized, transposed), in place, empty and
0-dim tensors, batches, CPU's errors, and both devices. Models build positions and causal
masks with these in every step."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]


def errors_match(fn, device):
    """fn raises on the device exactly what it raises on the CPU."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value)) as dev:
        fn(device)
    assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
@pytest.mark.parametrize("args", [(7,), (0,), (2, 9), (1, 10, 3), (10, 0, -3), (0.5, 3.0, 0.25), (-1.5, 1.5, 0.5)],
                         ids=str)
def test_arange_matches_cpu(args, dtype, device):
    if dtype in (torch.int64, torch.int32, torch.int8, torch.uint8) and any(isinstance(a, float) for a in args):
        args = tuple(int(a * 4) for a in args)
    try:
        expected = torch.arange(*args, dtype=dtype)
    except RuntimeError:  # a bound the dtype cannot hold: the same error on the device
        errors_match(lambda d: torch.arange(*args, dtype=dtype, device=d), device)
        return
    torch.openreg.reset_fallback_counts()
    got = torch.arange(*args, dtype=dtype, device=device)
    assert got.device == torch.device(device) and got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)
    assert torch.openreg.fallback_counts() == {}
    # out=: empty, right-sized, and a strided view (written through a contiguous buffer).
    for out in [torch.empty(0, dtype=dtype, device=device), torch.empty(expected.numel(), dtype=dtype, device=device),
                torch.empty(2 * expected.numel(), dtype=dtype, device=device)[::2]]:
        assert torch.arange(*args, out=out) is out
        assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_arange_errors_match_cpu(device):
    errors_match(lambda d: torch.arange(0, 5, 0, device=d), device)
    errors_match(lambda d: torch.arange(5, 0, 1, device=d), device)
    errors_match(lambda d: torch.arange(0, float("inf"), device=d), device)
    errors_match(lambda d: torch.arange(0, 1e20, 1e-20, device=d), device)  # too many elements


@pytest.mark.parametrize("device", DEVICES)
def test_arange_warns_as_cpu_when_it_resizes_a_wrong_sized_out(device):
    for d in ["cpu", device]:
        out = torch.empty(3, device=d)
        with pytest.warns(UserWarning, match="The number of elements in the out tensor of shape \\[3\\] is 3 which does not match the computed number of elements 5"):
            torch.arange(5, out=out)
        assert out.shape == (5,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_integer_fill_matches_cpu(dtype, device):
    torch.openreg.reset_fallback_counts()
    for shape in [(7,), (3, 4), (), (0, 2)]:
        for value in [0, 5, -1 if dtype != torch.uint8 else 255]:
            got = torch.empty(shape, dtype=dtype, device=device).fill_(value)
            assert torch.equal(got.cpu(), torch.empty(shape, dtype=dtype).fill_(value))
            assert torch.equal(torch.full(shape, value, dtype=dtype, device=device).cpu(), torch.full(shape, value, dtype=dtype))
    assert torch.openreg.fallback_counts() == {}
    # A strided tensor: correct, through the host path.
    base = torch.zeros(4, 6, dtype=dtype, device=device)
    base[:, ::2].fill_(7)
    expected = torch.zeros(4, 6, dtype=dtype)
    expected[:, ::2].fill_(7)
    assert torch.equal(base.cpu(), expected)
    errors_match(lambda d: torch.empty(3, dtype=torch.int8, device=d).fill_(300), device)


def matrices(dtype, shape, transposed=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) * 5
    x = x.to(dtype) if dtype != torch.bool else x > 0
    return x.transpose(-1, -2) if transposed else x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.complex64], ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7), (7, 3), (2, 4, 6), (0, 4), (3, 0), (2, 0, 3)], ids=str)
@pytest.mark.parametrize("name", ["tril", "triu"])
def test_triangles_match_cpu(name, shape, dtype, device):
    for transposed in [False, True]:
        x = matrices(dtype, shape, transposed)
        for k in [-8, -2, -1, 0, 1, 2, 8]:
            expected = getattr(torch, name)(x, k)
            torch.openreg.reset_fallback_counts()
            got = getattr(torch, name)(x.to(device), k)
            assert got.device == torch.device(device) and torch.equal(got.cpu(), expected)
            if dtype != torch.complex64:
                assert torch.openreg.fallback_counts() == {}
            inplace = x.to(device)
            getattr(inplace, name + "_")(k)
            assert torch.equal(inplace.cpu(), expected)
            for out in [torch.empty(0, dtype=dtype, device=device),
                        torch.empty(shape[:-2] + shape[-2:][::-1], dtype=dtype, device=device).transpose(-1, -2)]:
                if out.shape != expected.shape and out.numel() != 0:
                    continue
                assert getattr(torch, name)(x.to(device), k, out=out) is out
                assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_triangle_errors_and_autograd_match_cpu(device):
    errors_match(lambda d: torch.tril(torch.ones(3, device=d)), device)
    errors_match(lambda d: torch.triu(torch.ones((), device=d)), device)
    x = torch.randn(4, 4, requires_grad=True)
    y = x.detach().to(device).requires_grad_()
    torch.tril(x, -1).sum().backward()
    torch.tril(y, -1).sum().backward()
    assert torch.equal(y.grad.cpu(), x.grad)
    # A causal mask, the way attention builds it.
    mask = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    assert torch.equal(mask.cpu(), torch.ones(6, 6, dtype=torch.bool).tril())
