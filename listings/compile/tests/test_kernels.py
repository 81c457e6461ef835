"""Every kernel of this crate (add, mul, abs) through the same correctness matrix as the
backend's: shapes, broadcasting, strided and transposed inputs, in-place, `out=` (empty,
right-sized, wrongly strided), 0-dim, empty, dtypes, and both devices, against CPU."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]

# (left, right) inputs as functions of a CPU generator: contiguous, broadcast, transposed,
# sliced with a step, 0-dim, empty.
LAYOUTS = {
    "contiguous": lambda: (torch.randn(4, 5), torch.randn(4, 5)),
    "broadcast": lambda: (torch.randn(4, 1), torch.randn(1, 5)),
    "transposed": lambda: (torch.randn(5, 4).t(), torch.randn(5, 4).t()),
    "mixed": lambda: (torch.randn(5, 4).t(), torch.randn(4, 5)),
    "strided": lambda: (torch.randn(4, 10)[:, ::2], torch.randn(8, 5)[::2]),
    "odd": lambda: (torch.randn(3, 7, 13), torch.randn(7, 13)),
    "zero_dim": lambda: (torch.randn(()), torch.randn(())),
    "scalar_tensor": lambda: (torch.randn(3, 4), torch.tensor(2.5)),
    "empty": lambda: (torch.randn(0, 5), torch.randn(0, 5)),
}
DTYPES = [torch.float32, torch.float16, torch.int64]


def inputs(layout, dtype):
    a, b = LAYOUTS[layout]()
    if dtype == torch.int64:
        a, b = (a * 10).to(dtype), (b * 10).to(dtype)
    return a.to(dtype), b.to(dtype)


def on(t, device):
    """The same values, with the same strides, on the device (t.to would make them dense)."""
    d = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device)
    return d.copy_(t)


# name: (functional form taking out=, in-place form or None when the operator has none).
OPS = {
    "add": (lambda a, b, **kw: torch.add(a, b, alpha=2, **kw), lambda a, b: a.add_(b, alpha=2)),
    "mul": (lambda a, b, **kw: torch.mul(a, b, **kw), lambda a, b: a.mul_(b)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", OPS)
def test_binary(name, layout, dtype, device):
    functional, inplace = OPS[name]
    a, b = inputs(layout, dtype)
    x, y = on(a, device), on(b, device)
    expected = functional(a, b)

    got = functional(x, y)
    assert got.device == torch.device(device)
    assert got.stride() == expected.stride(), "the output takes CPU's layout"
    torch.testing.assert_close(got.cpu(), expected)

    # out=: empty (resized to the strides the iterator asks for), right-sized, and
    # right-sized but transposed.
    for out in [torch.empty(0, dtype=dtype, device=device),
                torch.empty(expected.shape, dtype=dtype, device=device),
                torch.empty(expected.shape[::-1], dtype=dtype, device=device).t()
                if expected.dim() == 2 else torch.empty(expected.shape, dtype=dtype, device=device)]:
        result = functional(x, y, out=out)
        assert result is out
        torch.testing.assert_close(out.cpu(), expected)

    # In place, when the operator has that form and the result has self's shape.
    if inplace is not None and expected.shape == a.shape:
        x2 = on(a, device)
        inplace(x2, y)
        torch.testing.assert_close(x2.cpu(), inplace(a.clone(), b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_abs(layout, dtype, device):
    a, _ = inputs(layout, dtype)
    x = on(a, device)
    torch.testing.assert_close(x.abs().cpu(), a.abs())
    out = torch.empty(0, dtype=dtype, device=device)
    torch.abs(x, out=out)
    torch.testing.assert_close(out.cpu(), a.abs())
    x.abs_()
    torch.testing.assert_close(x.cpu(), a.abs())


def test_a_transposed_out_of_a_transposed_sum():
    # The case that once gave wrong numbers: an empty out= tensor, transposed inputs.
    a, b = torch.randn(3, 5).t(), torch.randn(3, 5).t()
    out = torch.empty(0, device="openreg")
    torch.add(a.openreg(), b.openreg(), out=out)
    assert out.stride() == (1, 5)
    torch.testing.assert_close(out.cpu(), a + b)


def test_errors_match_cpu():
    cases = [
        lambda d: torch.ones(2, 3, device=d) + torch.ones(4, device=d),
        lambda d: torch.ones(2, 3, device=d).add_(torch.ones(4, 2, 3, device=d)),
        lambda d: torch.add(torch.ones(2, device=d), torch.ones(2, device=d),
                            out=torch.empty(2, dtype=torch.int64, device=d)),
    ]
    for case in cases:
        with pytest.raises(RuntimeError) as cpu:
            case("cpu")
        with pytest.raises(RuntimeError) as dev:
            case("openreg")
        assert str(dev.value) == str(cpu.value)


def test_mixed_devices_are_an_error():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="openreg:0") + torch.ones(2, device="openreg:1")
