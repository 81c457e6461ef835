"""gather against CPU over the correctness matrix: dimensions (negative included), strided and
transposed inputs and indices, out= (empty, right-sized, transposed), 0-dim and empty tensors,
dtypes, CPU's errors (an index out of range names it), autograd, and both devices."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
CASES = [  # (self's shape, dim, index's shape)
    ((4, 5), 0, (3, 5)), ((4, 5), 1, (4, 2)), ((4, 5), -1, (2, 7)), ((3, 4, 5), 1, (2, 3, 4)),
    ((3, 4, 5), 2, (3, 4, 9)), ((), 0, ()), ((), 0, (1,)), ((6,), 0, (0,)), ((2, 3), 0, (0, 3)),
]


def errors_match(fn, device):
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value)) as dev:
        fn(device)
    assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_gather_matches_cpu(case, dtype, device, layout):
    shape, dim, index_shape = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) * 4
    x = x > 0 if dtype == torch.bool else x.to(dtype)
    size = 1 if x.dim() == 0 else x.size(dim)
    index = torch.randint(0, size, index_shape, generator=g)
    if layout == "transposed" and x.dim() >= 2:  # the same values, in transposed memory
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
        index = index.transpose(0, 1).contiguous().transpose(0, 1)
    expected = torch.gather(x, dim, index)
    torch.openreg.reset_fallback_counts()
    got = torch.gather(x.to(device), dim, index.to(device))
    assert got.device == torch.device(device) and torch.equal(got.cpu(), expected)
    assert torch.openreg.fallback_counts() == {}
    for out in [torch.empty(0, dtype=x.dtype, device=device),
                torch.empty(expected.shape, dtype=x.dtype, device=device),
                torch.empty(expected.shape[::-1], dtype=x.dtype, device=device).t() if expected.dim() == 2 else None]:
        if out is None:
            continue
        assert torch.gather(x.to(device), dim, index.to(device), out=out) is out
        assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_errors_match_cpu(device):
    errors_match(lambda d: torch.gather(torch.ones(3, device=d), 0, torch.tensor([5], device=d)), device)
    errors_match(lambda d: torch.gather(torch.ones(3, device=d), 0, torch.tensor([-1], device=d)), device)
    errors_match(lambda d: torch.gather(torch.ones(2, 3, device=d), 0, torch.zeros(3, 4, dtype=torch.long, device=d)),
                 device)
    errors_match(lambda d: torch.gather(torch.ones(2, 3, device=d), 2, torch.zeros(2, 3, dtype=torch.long, device=d)),
                 device)


@pytest.mark.parametrize("device", DEVICES)
def test_int32_indices_as_cpu(device):
    x, index = torch.arange(6.0).view(2, 3), torch.tensor([[0, 2], [1, 1]], dtype=torch.int32)
    assert torch.equal(torch.gather(x.to(device), 1, index.to(device)).cpu(), torch.gather(x, 1, index))


@pytest.mark.parametrize("device", DEVICES)
def test_gather_gradient_matches_cpu(device):
    x = torch.randn(4, 5, requires_grad=True)
    y = x.detach().to(device).requires_grad_()
    index = torch.tensor([[0, 1], [2, 3], [4, 0], [1, 1]])
    torch.gather(x, 1, index).pow(2).sum().backward()
    torch.gather(y, 1, index.to(device)).pow(2).sum().backward()
    torch.testing.assert_close(y.grad.cpu(), x.grad)
