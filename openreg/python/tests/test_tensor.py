"""Tensors on the device: creation, copies, printing, views, resize_, set_, item()."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]


@pytest.mark.parametrize("device", DEVICES)
def test_factories(device):
    for t in [
        torch.empty(2, 3, device=device),
        torch.zeros(2, 3, device=device),
        torch.ones(4, dtype=torch.int64, device=device),
        torch.randn(5, device=device),
        torch.arange(6, device=device),
        torch.full((2,), 7.0, device=device),
        torch.empty_strided((2, 3), (1, 2), device=device),
    ]:
        assert t.device == torch.device(device)
    assert torch.zeros(2, 3, device=device).cpu().eq(0).all()
    assert torch.full((2,), 7.0, device=device).cpu().tolist() == [7.0, 7.0]
    assert torch.arange(6, device=device).cpu().tolist() == list(range(6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int8, torch.int32, torch.int64, torch.bool, torch.complex64])
def test_round_trip_every_dtype(dtype):
    cpu = (torch.randn(7, 5) * 10).to(dtype)
    for device in DEVICES:
        assert torch.equal(cpu.to(device).cpu(), cpu)


def test_copies_in_every_direction_and_across_devices():
    cpu = torch.randn(64, 33)
    d0 = cpu.to("openreg:0")
    d1 = d0.to("openreg:1")  # device to device, across devices
    assert d1.device == torch.device("openreg:1")
    d0b = torch.empty_like(d0).copy_(d0)  # same device
    back = torch.empty(64, 33)
    back.copy_(d1)  # device to host
    assert torch.equal(back, cpu)
    assert torch.equal(d0b.cpu(), cpu)


def test_copies_convert_dtype_strides_and_broadcast():
    cpu = torch.arange(24.0).reshape(2, 3, 4)
    dev = cpu.to("openreg")
    # Non-contiguous source, in every direction.
    assert torch.equal(dev.transpose(0, 2).cpu(), cpu.transpose(0, 2))
    assert torch.equal(dev.transpose(0, 2).contiguous().cpu(), cpu.transpose(0, 2).contiguous())
    assert torch.equal(cpu.transpose(0, 2).to("openreg").cpu(), cpu.transpose(0, 2))
    # dtype conversion on device, and host to device with conversion.
    assert torch.equal(dev.to(torch.int16).cpu(), cpu.to(torch.int16))
    assert torch.equal(cpu.to("openreg", torch.float64).cpu(), cpu.double())
    # Broadcasting copy_ and copies into a non-contiguous destination.
    dst = torch.zeros(3, 4, 5, device="openreg").permute(2, 0, 1)
    dst.copy_(torch.arange(4.0))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(5, 3, 4))
    # Into a narrow view of a larger tensor.
    big = torch.zeros(10, device="openreg:1")
    big[2:5].copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert big.cpu().tolist() == [0, 0, 1, 2, 3, 0, 0, 0, 0, 0]
    # Conjugate views keep their meaning.
    z = torch.tensor([1 + 2j, 3 - 1j])
    assert torch.equal(z.conj().to("openreg").cpu(), z.conj().resolve_conj())


REAL = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
        torch.float32, torch.float64, torch.bool]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("to", REAL, ids=str)
@pytest.mark.parametrize("source", REAL, ids=str)
def test_dtype_conversions_on_the_device_are_cpus(source, to, device):
    """Every pair of real dtypes and bool, converted by a kernel on the stream (never on the host
    over device memory), in every layout a copy meets, equal to CPU's conversion: truncation
    toward zero, uint8 through int64, wrapping integers, float64 to float16 through float32."""
    values = torch.tensor([0.0, 1.0, -1.0, 2.5, -2.5, 7.75, -7.75, 100.3, -100.3, 0.5, 65504.0, 1e-3])
    x = (values if source.is_floating_point else values.round()).to(source) if source != torch.bool else values != 0
    x = x.repeat(6)[:60].reshape(3, 4, 5)
    cases = {
        "contiguous": lambda t: t,
        "transposed": lambda t: t.transpose(0, 2),
        "strided": lambda t: t[:, ::2, 1:],
        "broadcast": lambda t: t[:1, :1].expand(3, 4, 5),
        "0-dim": lambda t: t[1, 2, 3],
        "empty": lambda t: t[:, :0],
    }
    for name, view in cases.items():
        expected = view(x).to(to)
        got = view(x.to(device)).to(to)
        assert got.device == torch.device(device) and got.dtype == to
        assert torch.equal(got.cpu(), expected), (name, got.cpu(), expected)
        # Into an existing (non-contiguous) destination: copy_.
        out = torch.zeros(expected.shape[::-1], dtype=to, device=device).permute(tuple(reversed(range(expected.dim()))))
        out.copy_(view(x.to(device)))
        assert torch.equal(out.cpu(), expected), name
    # Between host and device and between devices, the conversion is made on one side and only
    # contiguous bytes cross: host to device, device to a strided host tensor, device to device.
    other = "openreg:1" if device == "openreg:0" else "openreg:0"
    for name in ["transposed", "broadcast", "0-dim"]:
        view = cases[name]
        expected = view(x).to(to)
        assert torch.equal(view(x).to(device, to).cpu(), expected), name
        host = torch.zeros(expected.shape[::-1], dtype=to).permute(tuple(reversed(range(expected.dim()))))
        host.copy_(view(x.to(device)))
        assert torch.equal(host, expected), name
        assert torch.equal(view(x.to(device)).to(other, to).cpu(), expected), name


def test_dtype_conversions_do_not_wait_for_the_device():
    """The conversion is queued like any kernel: with a long matmul queued, it returns at once."""
    a = torch.randn(1536, 1536, device="openreg")
    x = torch.rand(1000, device="openreg")
    for to in [torch.float64, torch.int64, torch.bool, torch.uint8]:
        torch.openreg.synchronize()
        busy = a @ a @ a
        y = x.to(to)
        assert not torch.openreg.current_stream().query(), f"the conversion to {to} waited for the stream"
        assert torch.equal(y.cpu(), x.cpu().to(to))
        del busy


def test_negative_and_conjugate_views_of_device_tensors():
    # Resolving the bit clones the view through _copy_from; that recursed until the stack
    # overflowed before _copy_from went through the Negative and Conjugate fallbacks.
    x = torch.randn(5)
    neg = torch._neg_view(x.openreg())
    assert neg.is_neg() and torch.equal(neg.cpu(), -x)
    assert torch.equal((neg + x.openreg()).cpu(), torch.zeros(5))
    assert torch.equal(neg.clone().cpu(), -x) and not neg.clone().is_neg()
    out = torch.empty(5, device="openreg:1")
    out.copy_(neg)
    assert torch.equal(out.cpu(), -x)
    torch._neg_view(out).copy_(x.openreg(1))
    assert torch.equal(out.cpu(), -x)
    z = torch.randn(3, dtype=torch.cfloat)
    conj = z.openreg().conj()
    assert conj.is_conj() and torch.equal(conj.cpu(), z.conj().resolve_conj())
    assert torch.equal((conj * z.openreg()).cpu(), z.conj() * z)
    assert torch.equal(conj.resolve_conj().cpu(), z.conj().resolve_conj())


def test_empty_tensors():
    e = torch.empty(0, 3, device="openreg")
    assert e.cpu().shape == (0, 3)
    assert torch.empty(0, device="openreg").to("openreg:1").numel() == 0


def test_printing():
    t = torch.tensor([[1.5, -2.0], [0.0, 3.25]], device="openreg:1")
    text = str(t)
    assert "device='openreg:1'" in text
    assert "1.5000" in text and "3.2500" in text
    assert "openreg:0" in repr(torch.zeros(2, dtype=torch.int32, device="openreg"))


def test_views_and_reshape():
    cpu = torch.arange(24.0)
    dev = cpu.to("openreg")
    v = dev.view(4, 6)
    assert v.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert torch.equal(v.cpu(), cpu.view(4, 6))
    assert torch.equal(dev.view(2, 3, 4)[1, :, 2].cpu(), cpu.view(2, 3, 4)[1, :, 2])
    assert torch.equal(dev.reshape(6, 4).t().reshape(-1).cpu(), cpu.reshape(6, 4).t().reshape(-1))
    assert torch.equal(dev.view(4, 6).t().reshape(24).cpu(), cpu.view(4, 6).t().reshape(24))
    assert torch.equal(dev[3:9:2].cpu(), cpu[3:9:2])
    assert torch.equal(dev.unsqueeze(0).expand(2, 24).cpu(), cpu.unsqueeze(0).expand(2, 24))


def test_as_strided():
    cpu = torch.arange(10.0)
    dev = cpu.to("openreg")
    assert torch.equal(dev.as_strided((3, 2), (2, 1), 1).cpu(), cpu.as_strided((3, 2), (2, 1), 1))
    with pytest.raises(RuntimeError, match="out of bounds"):
        dev.as_strided((5, 5), (5, 1))


def test_resize_keeps_data_and_grows_storage():
    dev = torch.arange(6.0, device="openreg:1")
    dev.resize_(2, 5)
    assert dev.shape == (2, 5)
    assert dev.untyped_storage().nbytes() >= 40
    assert dev.view(-1)[:6].cpu().tolist() == [0, 1, 2, 3, 4, 5]
    dev.resize_(2)
    assert dev.cpu().tolist() == [0, 1]
    cl = torch.empty(2, 3, 4, 5, device="openreg").resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    # Storage resize, as UntypedStorage.resize_ does it.
    s = torch.ones(4, device="openreg").untyped_storage()
    s.resize_(32)
    assert s.nbytes() == 32
    assert torch.tensor([], device="openreg").set_(s)[:4].view(torch.float32).cpu().tolist() == [1, 1, 1, 1]


def test_resize_as_and_out_resize():
    out = torch.empty(0, device="openreg")
    torch.add(torch.ones(3, device="openreg"), 1, out=out)
    assert out.cpu().tolist() == [2, 2, 2]


def test_set_all_overloads():
    src = torch.arange(12.0, device="openreg:1")
    a = torch.empty(0, device="openreg:1").set_(src)
    assert torch.equal(a.cpu(), src.cpu())
    b = torch.empty(0, device="openreg:1").set_(src.untyped_storage())
    assert torch.equal(b.cpu(), src.cpu())
    c = torch.empty(0, device="openreg:1").set_(src.untyped_storage(), 2, (2, 3), (3, 1))
    assert c.cpu().tolist() == [[2, 3, 4], [5, 6, 7]]
    with pytest.raises(RuntimeError, match="devices must match"):
        torch.empty(0, device="openreg:0").set_(src.untyped_storage())


def test_item_and_scalars():
    t = torch.tensor([1.5, 2.5, -3.0], device="openreg:1")
    assert t[2].item() == -3.0
    assert torch.tensor(7, device="openreg").item() == 7
    assert torch.tensor(True, device="openreg").item() is True
    assert float(t.sum()) == 1.0
    assert t.tolist() == [1.5, 2.5, -3.0]
    with pytest.raises(RuntimeError, match="a Tensor with 3 elements cannot be converted to Scalar"):
        t.item()


def test_generated_methods():
    t = torch.ones(2)
    d = t.openreg()
    assert d.is_openreg and not t.is_openreg
    assert t.openreg(1).device == torch.device("openreg:1")
    m = torch.nn.Linear(3, 2).openreg()
    assert m.weight.device == torch.device("openreg:0")
    s = torch.UntypedStorage(8).openreg()
    assert s.device == torch.device("openreg:0") and s.is_openreg
    assert torch.UntypedStorage(16, device="openreg:1").device == torch.device("openreg:1")


def test_pin_memory():
    t = torch.arange(10.0)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and torch.equal(p, t)
    assert torch.equal(p.to("openreg").cpu(), t)
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        torch.empty(2, device="openreg", pin_memory=True)


def test_packed_sequence_methods():
    from torch.nn.utils.rnn import pack_padded_sequence

    packed = pack_padded_sequence(torch.randn(3, 2, 4), torch.tensor([3, 2]))
    moved = packed.openreg()
    assert moved.is_openreg and moved.data.device == torch.device("openreg:0")
    assert torch.equal(moved.data.cpu(), packed.data)


def test_view_operators_without_a_composite_kernel_are_views():
    z = torch.randn(3, dtype=torch.complex64)
    d = z.to("openreg")
    real = torch.view_as_real(d)
    assert real.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    real[0, 0] = 7.0  # a write through the view reaches the complex tensor
    assert d.cpu()[0].real.item() == 7.0
    assert torch.equal(torch.view_as_complex(real).cpu(), d.cpu())
    x = torch.arange(10.0, device="openreg")
    u = x.unfold(0, 4, 2)
    assert u._base is x and torch.equal(u.cpu(), torch.arange(10.0).unfold(0, 4, 2))
    # make_tensor draws complex values through view_as_real: they must be random.
    m = torch.testing.make_tensor(1000, dtype=torch.complex64, device="openreg")
    assert m.cpu().abs().std() > 0.1


def test_the_fallback_refuses_view_operators():
    # A view operator has no CPU-run meaning on a device: the result would be a copy.
    lib = torch.library.Library("openreg_test_views", "DEF")
    lib.define("alias_of(Tensor(a) x) -> Tensor(a)")
    lib.impl("alias_of", lambda x: x.view(x.shape), "CPU")
    with pytest.raises(NotImplementedError, match="is a view operator with no openreg kernel"):
        torch.ops.openreg_test_views.alias_of(torch.ones(2, device="openreg"))
