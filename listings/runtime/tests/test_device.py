# ANCHOR: tests
import pytest
import torch
import torch_openreg  # noqa: F401  (this stage has no autoload yet)


def test_devices_and_current_device():
    assert torch.openreg.device_count() == 2
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        assert torch.empty(2, device="openreg").device == torch.device("openreg:1")
    assert torch.openreg.current_device() == 0
    assert torch.accelerator.current_accelerator() == torch.device("openreg")


def test_tensors_round_trip_and_compute_through_the_fallback():
    cpu = torch.arange(6.0).reshape(2, 3)
    for device in ["openreg:0", "openreg:1"]:
        x = cpu.to(device)
        assert torch.equal((x * 2 + 1).cpu(), cpu * 2 + 1)
        assert x.t().contiguous().cpu().tolist() == cpu.t().tolist()
        assert x[1, 2].item() == 5.0
    assert "openreg:1" in str(cpu.to("openreg:1"))


def test_negative_and_conjugate_views():
    x = torch.randn(4)
    neg = torch._neg_view(x.to("openreg"))
    assert torch.equal(neg.cpu(), -x) and torch.equal((neg + 1).cpu(), 1 - x)
    z = torch.randn(3, dtype=torch.cfloat)
    assert torch.equal(z.to("openreg").conj().cpu(), z.conj().resolve_conj())


def test_bad_device_index():
    with pytest.raises(RuntimeError, match=r"^OpenReg error: invalid device ordinal: index 5 for openreg"):
        torch.empty(1, device="openreg:5")
# ANCHOR_END: tests


# ANCHOR: protected
def test_the_host_cannot_touch_device_memory():
    """A device address is not a host address: host code reading one faults, as it would
    on an accelerator. Every other test in this directory runs under the same rule."""
    import signal
    import subprocess
    import sys

    touch = ("import ctypes, torch, torch_openreg\n"
             "x = torch.ones(4, device='openreg')\n"
             "ctypes.string_at(x.data_ptr(), 4)\n")
    result = subprocess.run([sys.executable, "-P", "-c", touch], capture_output=True, timeout=120)
    assert result.returncode == -signal.SIGSEGV, result.stderr
# ANCHOR_END: protected


def test_memory_a_tensor_grows_into_is_on_its_device():
    x = torch.empty(0, device="openreg:1")  # the current device stays 0
    x.resize_(1000)
    assert x.untyped_storage().device == torch.device("openreg:1")
    x.fill_(2.0)
    assert x.cpu().eq(2.0).all()
