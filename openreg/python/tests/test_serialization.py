"""Storage, backend metadata, torch.save / torch.load, DLPack and legacy tensor types."""

import io

import pytest
import torch

METADATA = {"version_number": True, "format_number": True}


def roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def test_backend_meta_survives_save_and_load():
    t = torch.randn(3, 3, device="openreg")
    assert torch._utils.get_tensor_metadata(t) == {}
    torch._utils.set_tensor_metadata(t, METADATA)
    assert torch._utils.get_tensor_metadata(t) == METADATA
    loaded = roundtrip(t)
    assert loaded.is_openreg and torch.equal(loaded.cpu(), t.cpu())
    assert torch._utils.get_tensor_metadata(loaded) == METADATA
    on_cpu = roundtrip(t, map_location="cpu")
    assert on_cpu.is_cpu and torch._utils.get_tensor_metadata(on_cpu) == {}
    # Shallow copies (detach, views of the TensorImpl) clone the metadata.
    assert torch._utils.get_tensor_metadata(t.detach()) == METADATA


def test_map_location_to_another_device():
    t = torch.randn(4, device="openreg:0")
    loaded = roundtrip(t, map_location="openreg:1")
    assert loaded.device == torch.device("openreg:1") and torch.equal(loaded.cpu(), t.cpu())
    loaded = roundtrip(t.cpu(), map_location="openreg")
    assert loaded.is_openreg


def test_state_dict_round_trip():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).openreg()
    state = roundtrip(model.state_dict())
    assert all(v.is_openreg for v in state.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).openreg()
    fresh.load_state_dict(state)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu())
    cpu_state = roundtrip(model.state_dict(), map_location="cpu")
    assert all(v.is_cpu for v in cpu_state.values())


def test_storage_location_tags():
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device="openreg")) == "openreg:0"
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device="openreg:1")) == "openreg:1"
    restored = torch.serialization.default_restore_location(torch.empty(4).untyped_storage(), "openreg:1")
    assert restored.is_openreg and restored.device == torch.device("openreg:1")


def test_checkpoint_for_a_missing_device_is_a_clear_error(monkeypatch):
    buffer = io.BytesIO()
    with monkeypatch.context() as m:  # pretend it was saved on a machine with 3 devices
        m.setattr(torch.serialization, "location_tag", lambda storage: "openreg:2")
        torch.save(torch.ones(2, device="openreg"), buffer)
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="(?i)openreg device 2 but torch.openreg.device_count\\(\\) is 2"):
        torch.load(buffer)
    buffer.seek(0)
    assert torch.load(buffer, map_location="openreg:1").device == torch.device("openreg:1")


def test_dlpack_export_and_import():
    x = torch.arange(6.0, device="openreg:1")
    y = torch.from_dlpack(x)
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    z = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert torch.equal(z.cpu(), torch.arange(6.0))
    assert torch.ones(1).__dlpack_device__()[0] == torch.utils.dlpack.DLDeviceType.kDLCPU


def test_legacy_tensor_types():
    t = torch.openreg.FloatTensor(2, 3)
    assert t.shape == (2, 3) and t.dtype == torch.float32 and t.is_openreg
    assert isinstance(t, torch.openreg.FloatTensor)
    assert not isinstance(t, torch.openreg.LongTensor)
    assert not isinstance(torch.ones(2), torch.openreg.FloatTensor)
    assert torch.openreg.LongTensor([1, 2]).cpu().tolist() == [1, 2]
    assert torch.openreg.BFloat16Tensor(4).dtype == torch.bfloat16
