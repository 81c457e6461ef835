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
    with pytest.raises(RuntimeError, match="Expected a generator on openreg:0, but got one on openreg:1"):
        torch.randn(3, device="openreg:0", generator=torch.Generator(device="openreg:1"))
    with pytest.raises(RuntimeError, match="^Expected a 'openreg' device type for generator but found 'cpu'"):
        torch.rand(3, device="openreg:0", generator=torch.Generator())


def test_bad_states():
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.openreg.set_rng_state([1, 2, 3])
    with pytest.raises(RuntimeError, match="RNG state is wrong size: expected 16 bytes"):
        torch.openreg.set_rng_state(torch.zeros(10, dtype=torch.uint8))
    with pytest.raises(ValueError, match="expected 2 RNG states"):
        torch.openreg.set_rng_state_all([torch.openreg.get_rng_state()])
    with pytest.raises(RuntimeError, match="invalid device ordinal: index 3 "):
        torch.Generator(device="openreg:3")


@pytest.mark.parametrize(
    "op",
    [
        lambda d: torch.rand(5, device=d),
        lambda d: torch.randn(5, device=d),
        lambda d: torch.randint(0, 100, (5,), device=d),
        lambda d: torch.empty(5, device=d).normal_(2.0, 3.0),
        lambda d: torch.empty(5, device=d).uniform_(-1, 1),
        lambda d: torch.empty(5, device=d).bernoulli_(0.5),
        lambda d: torch.nn.functional.dropout(torch.ones(8, device=d), p=0.5),
    ],
)
def test_random_ops_reproduce_after_reseeding_per_device(op):
    torch.openreg.manual_seed_all(11)
    first = [op(f"openreg:{i}").cpu() for i in range(2)]
    torch.openreg.manual_seed_all(11)
    again = [op(f"openreg:{i}").cpu() for i in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    # Each device draws from its own generator: reseeding device 1 alone changes only it.
    torch.openreg.manual_seed_all(11)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(12)
    mixed = [op(f"openreg:{i}").cpu() for i in range(2)]
    assert torch.equal(mixed[0], first[0])
    assert not torch.equal(mixed[1], first[1])


def test_dropout_matches_its_definition_and_trains():
    torch.openreg.manual_seed(0)
    x = torch.randn(1000, device="openreg", requires_grad=True)
    y = torch.nn.functional.dropout(x, p=0.25)
    kept = y.detach().cpu() != 0
    assert 0.6 < kept.float().mean().item() < 0.9
    torch.testing.assert_close(y.detach().cpu()[kept], (x.detach().cpu() / 0.75)[kept])
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), kept.float() / 0.75)
    assert torch.equal(torch.nn.functional.dropout(x, p=0.25, training=False).detach().cpu(), x.detach().cpu())
