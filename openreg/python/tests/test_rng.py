"""Per-device default generators and the torch.openreg RNG functions."""

import pytest
import torch


def draw(device="openreg"):
    return torch.randn(4, device=device).cpu()


def test_manual_seed_reproduces():
    torch.openreg.manual_seed(42)
    a = draw()
    torch.openreg.manual_seed(42)
    assert torch.equal(draw(), a)
    torch.manual_seed(42)  # torch.manual_seed seeds every openreg device too
    assert torch.equal(draw(), a)
    assert torch.openreg.initial_seed() == 42


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(1)
    a0 = draw("openreg:0")
    with torch.openreg.device(1):
        torch.openreg.manual_seed(2)  # seeds device 1 only
    torch.openreg.manual_seed(1)
    assert torch.equal(draw("openreg:0"), a0)
    torch.openreg.manual_seed_all(1)
    assert torch.equal(draw("openreg:1"), a0)


def test_rng_state_round_trip():
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8
    a = draw()
    torch.openreg.set_rng_state(state)
    assert torch.equal(draw(), a)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == 2
    b = [draw("openreg:0"), draw("openreg:1")]
    torch.openreg.set_rng_state_all(states)
    assert torch.equal(draw("openreg:0"), b[0]) and torch.equal(draw("openreg:1"), b[1])


def test_seed_and_seed_all():
    torch.openreg.seed()
    s = torch.openreg.initial_seed()
    torch.openreg.seed_all()
    assert torch.openreg.initial_seed() != s


def test_explicit_generators():
    g = torch.Generator(device="openreg:1").manual_seed(7)
    a = torch.rand(5, device="openreg:1", generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.rand(5, device="openreg:1", generator=g).cpu(), a)
    assert g.device == torch.device("openreg:1")


def test_generator_of_the_wrong_device():
    with pytest.raises(RuntimeError, match="Expected a generator on openreg:0 for aten::normal_, but got one on openreg:1"):
        torch.randn(3, device="openreg:0", generator=torch.Generator(device="openreg:1"))
    with pytest.raises(RuntimeError, match="but got one on cpu"):
        torch.rand(3, device="openreg:0", generator=torch.Generator())


def test_bad_states():
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.openreg.set_rng_state([1, 2, 3])
    with pytest.raises(RuntimeError, match="Expected a CPUGeneratorImplState of size 5056"):
        torch.openreg.set_rng_state(torch.zeros(10, dtype=torch.uint8))
    with pytest.raises(ValueError, match="expected 2 RNG states"):
        torch.openreg.set_rng_state_all([torch.openreg.get_rng_state()])
    with pytest.raises(RuntimeError, match="invalid device index 3"):
        torch.Generator(device="openreg:3")
