"""Random operators on the device: Philox numbers from a seed-and-offset generator, native
kernels for every random operator, their statistics, their errors, and graph replays that draw
fresh numbers equal to eager ones."""

import math
import os
import re
import subprocess
import sys

import pytest
import torch


def fresh(seed=0, device="openreg"):
    torch.openreg.manual_seed_all(seed)


# ---------------------------------------------------------------- the generator's state


def test_state_is_a_seed_and_an_offset():
    fresh(123)
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed, offset = (int.from_bytes(bytes(state[i:i + 8].tolist()), "little") for i in (0, 8))
    assert (seed, offset) == (123, 0)
    torch.rand(10, device="openreg")
    torch.randn(10, device="openreg")
    g = torch.openreg.random._generator()
    assert g.get_offset() == 8  # each launch reserves 4 numbers per element group
    assert g.initial_seed() == 123


def test_save_and_restore_in_the_middle_of_a_sequence():
    fresh(5)
    torch.randn(100, device="openreg")
    state = torch.openreg.get_rng_state()
    a = [torch.randn(7, device="openreg").cpu(), torch.randint(0, 9, (5,), device="openreg").cpu()]
    torch.randn(3, device="openreg")
    torch.openreg.set_rng_state(state)
    b = [torch.randn(7, device="openreg").cpu(), torch.randint(0, 9, (5,), device="openreg").cpu()]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_clone_and_graphsafe_state():
    g = torch.Generator(device="openreg").manual_seed(9)
    torch.rand(4, device="openreg", generator=g)
    copy = g.clone_state()
    a = torch.rand(4, device="openreg", generator=g).cpu()
    assert torch.equal(torch.rand(4, device="openreg", generator=copy).cpu(), a)
    # graphsafe_get_state shares the state: drawing through one moves the other.
    shared = g.graphsafe_get_state()
    before = g.get_offset()
    torch.rand(4, device="openreg", generator=shared)
    assert g.get_offset() == before + 4


def test_get_rng_state_all_and_independent_devices():
    fresh(1)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == 2 and all(s.numel() == 16 for s in states)
    a0 = torch.rand(5, device="openreg:0").cpu()
    a1 = torch.rand(5, device="openreg:1").cpu()
    assert torch.equal(a0, a1)  # same seed, same offset: the same numbers
    torch.rand(5, device="openreg:1")  # moves device 1 only
    torch.openreg.set_rng_state(states[0], 0)
    assert torch.equal(torch.rand(5, device="openreg:0").cpu(), a0)
    assert not torch.equal(torch.rand(5, device="openreg:1").cpu(), a1)


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("make", [
    lambda: torch.rand(1000, 37, device="openreg"),
    lambda: torch.randn(1000, 37, device="openreg", dtype=torch.float64),
    lambda: torch.randint(-5, 1 << 40, (999, 3), device="openreg"),
    lambda: torch.nn.functional.dropout(torch.ones(100_000, device="openreg"), 0.3),
])
def test_numbers_do_not_depend_on_the_layout(make):
    fresh(3)
    a = make().cpu()
    # The same numbers, written into a transposed tensor: element i of the logical order.
    fresh(3)
    t = torch.empty(a.shape[::-1], device="openreg", dtype=a.dtype).t()
    b = make().cpu()
    assert torch.equal(a, b)
    if a.dim() == 2 and a.is_floating_point():
        fresh(3)
        t.uniform_() if a.dtype == torch.float32 else t.normal_()
        fresh(3)
        c = torch.empty(a.shape, device="openreg", dtype=a.dtype)
        c.uniform_() if a.dtype == torch.float32 else c.normal_()
        assert torch.equal(t.cpu(), c.cpu())


def test_numbers_do_not_depend_on_the_thread_count():
    code = ("import torch, torch_openreg; torch.manual_seed(4); "
            "x = torch.cat([torch.randn(1 << 20, device='openreg').cpu(), "
            "torch.nn.functional.dropout(torch.ones(1 << 20, device='openreg'), 0.5).cpu()]); "
            "print(x.double().sum().item(), x[::9973].tolist())")
    run = lambda *prefix: subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True,
                                         timeout=120, check=True).stdout
    assert run("taskset", "-c", "0") == run()


# ---------------------------------------------------------------- statistics


def ks_statistic(samples, cdf):
    x = sorted(samples)
    n = len(x)
    return max(max(abs((i + 1) / n - cdf(v)), abs(i / n - cdf(v))) for i, v in enumerate(x))


# D at significance 1e-4 for n samples: sqrt(-ln(alpha / 2) / (2 n)).
KS_LIMIT = lambda n: math.sqrt(-math.log(0.5e-4) / (2 * n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name, fill, cdf, mean, var", [
    ("uniform", lambda t: t.uniform_(-2, 3), lambda v: min(max((v + 2) / 5, 0), 1), 0.5, 25 / 12),
    ("normal", lambda t: t.normal_(1.0, 2.0), lambda v: 0.5 * (1 + math.erf((v - 1) / (2 * math.sqrt(2)))), 1.0, 4.0),
    ("exponential", lambda t: t.exponential_(2.0), lambda v: 1 - math.exp(-2 * v) if v > 0 else 0.0, 0.5, 0.25),
    ("log_normal", lambda t: t.log_normal_(0.0, 0.5),
     lambda v: 0.5 * (1 + math.erf(math.log(v) / (0.5 * math.sqrt(2)))) if v > 0 else 0.0,
     math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25)),
])
def test_continuous_distributions(dtype, name, fill, cdf, mean, var):
    fresh(17)
    n = 20_000
    x = fill(torch.empty(n, device="openreg", dtype=dtype)).cpu().double()
    assert torch.isfinite(x).all()
    assert abs(x.mean().item() - mean) < 6 * math.sqrt(var / n) + (0.02 if dtype in (torch.float16, torch.bfloat16) else 0)
    assert abs(x.var().item() / var - 1) < 0.06
    if dtype in (torch.float32, torch.float64):  # 16-bit floats round the values to a grid
        assert ks_statistic(x.tolist(), cdf) < KS_LIMIT(n), name


def chi_square(counts, expected):
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected))


# The chi-square quantile at 1 - 1e-4 (Wilson-Hilferty) for k degrees of freedom.
def chi_limit(k):
    z = 3.719
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32])
def test_randint_is_uniform(dtype):
    fresh(2)
    n, low, high = 60_000, 3, 13
    x = torch.randint(low, high, (n,), device="openreg", dtype=dtype).cpu().long()
    assert x.min().item() >= low and x.max().item() < high
    counts = torch.bincount(x - low, minlength=high - low).tolist()
    assert chi_square(counts, [n / (high - low)] * (high - low)) < chi_limit(high - low - 1)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.93])
def test_bernoulli_scalar_and_tensor(p):
    fresh(8)
    n = 50_000
    for x in (torch.empty(n, device="openreg").bernoulli_(p),
              torch.bernoulli(torch.full((n,), p, device="openreg")),
              torch.empty(n, device="openreg", dtype=torch.bool).bernoulli_(p)):
        ones = x.cpu().double().sum().item()
        assert chi_square([ones, n - ones], [n * p, n * (1 - p)]) < chi_limit(1)
    # p per element: zeros stay 0, ones stay 1.
    p_tensor = torch.tensor([0.0, 1.0] * 500, device="openreg")
    assert torch.equal(torch.bernoulli(p_tensor).cpu(), p_tensor.cpu())


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial(replacement):
    fresh(6)
    weights = torch.tensor([[1.0, 2.0, 0.0, 5.0], [4.0, 1.0, 1.0, 0.0]], device="openreg")
    if replacement:
        x = torch.multinomial(weights, 40_000, replacement=True).cpu()
        for row, w in zip(x, weights.cpu()):
            counts = torch.bincount(row, minlength=4).tolist()
            assert counts[w.tolist().index(0.0)] == 0
            expected = [40_000 * v / w.sum().item() for v in w.tolist() if v > 0]
            assert chi_square([c for c, v in zip(counts, w.tolist()) if v > 0], expected) < chi_limit(2)
    else:
        firsts = []
        for _ in range(3000):
            x = torch.multinomial(weights[0], 3, replacement=False).cpu().tolist()
            assert sorted(x) == [0, 1, 3]
            firsts.append(x[0])
        # More samples than categories of positive weight: the rest come from weight 0, as on CPU.
        assert sorted(torch.multinomial(torch.tensor([0.5, 0.0, 0.5], device="openreg"), 3).cpu().tolist()) == [0, 1, 2]
        counts = [firsts.count(k) for k in (0, 1, 3)]
        assert chi_square(counts, [3000 * v / 8 for v in (1, 2, 5)]) < chi_limit(2)


def test_geometric_and_cauchy():
    fresh(1)
    g = torch.empty(40_000, device="openreg").geometric_(0.25).cpu()
    assert g.min().item() >= 1 and torch.equal(g, g.round())
    assert abs(g.mean().item() - 4.0) < 0.1
    c = torch.empty(40_001, device="openreg").cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.1
    assert abs((c - 1).abs().median().item() - 2.0) < 0.1  # the half-width at half-maximum


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_random_overloads_in_every_dtype(dtype):
    fresh(4)
    full = torch.empty(20_000, device="openreg", dtype=dtype).random_().cpu()
    digits = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}
    top = 1 if dtype == torch.bool else (2 ** digits[dtype] if dtype.is_floating_point else torch.iinfo(dtype).max)
    assert full.min().item() >= 0 and full.double().max().item() <= top
    assert len(torch.unique(full)) > 1
    to = torch.empty(5000, device="openreg", dtype=dtype).random_(2).cpu()
    assert sorted(torch.unique(to.long()).tolist()) == [0, 1]
    if dtype != torch.bool:
        ranged = torch.empty(5000, device="openreg", dtype=dtype).random_(3, 7).cpu().long()
        assert sorted(torch.unique(ranged).tolist()) == [3, 4, 5, 6]


def test_full_int64_range():
    fresh(2)
    x = torch.empty(10_000, device="openreg", dtype=torch.int64).random_(-(1 << 63), None).cpu()
    assert (x < 0).any() and (x > 0).any() and x.abs().float().max().item() > 2 ** 62


@pytest.mark.parametrize("n, dtype", [(0, torch.int64), (1, torch.int64), (1000, torch.int64), (777, torch.int32),
                                      (300, torch.float32)])
def test_randperm_is_a_permutation(n, dtype):
    fresh(3)
    p = torch.randperm(n, device="openreg", dtype=dtype).cpu()
    assert p.dtype == dtype
    assert torch.equal(p.sort().values.long(), torch.arange(n))
    if n > 10:
        assert not torch.equal(p.long(), torch.arange(n))


# ---------------------------------------------------------------- no fallback


def test_random_operators_reach_no_fallback():
    torch.openreg.reset_fallback_counts()
    d = "openreg"
    x = torch.rand(3, 4, device=d)
    torch.randn(3, device=d, dtype=torch.float64)
    torch.randint(0, 7, (5,), device=d)
    torch.rand_like(x), torch.randn_like(x), torch.randint_like(x, 10)
    torch.randperm(10, device=d)
    torch.multinomial(torch.tensor([0.2, 0.8], device=d), 4, replacement=True)
    torch.bernoulli(x), x.clone().bernoulli_(0.3), x.clone().exponential_(), x.clone().geometric_(0.5)
    x.clone().log_normal_(), x.clone().cauchy_(), x.clone().random_(5)
    torch.normal(x, 1.0), torch.normal(0.0, x), torch.normal(x, x)
    w = torch.empty(8, 6, device=d)
    for init in (torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.xavier_uniform_,
                 torch.nn.init.xavier_normal_, torch.nn.init.kaiming_uniform_, torch.nn.init.kaiming_normal_,
                 torch.nn.init.trunc_normal_, torch.nn.init.orthogonal_, torch.nn.init.eye_, torch.nn.init.zeros_,
                 torch.nn.init.ones_, lambda t: torch.nn.init.constant_(t, 0.3),
                 lambda t: torch.nn.init.sparse_(t, 0.5)):
        init(w)
    torch.nn.init.dirac_(torch.empty(4, 4, 3, 3, device=d))
    torch.nn.Linear(4, 4, device=d), torch.nn.Conv2d(2, 3, 3, device=d), torch.nn.Embedding(5, 3, device=d)
    torch.nn.LSTM(4, 4, device=d), torch.nn.TransformerEncoderLayer(8, 2, 16, device=d)
    torch.nn.functional.dropout(x, 0.5)
    torch.openreg.synchronize()
    assert torch.openreg.fallback_counts() == {}


# ---------------------------------------------------------------- bad input


def raises_like_cpu(fn):
    """The openreg call raises an exception of the class CPU raises, never crashes: at the call,
    or, for a check of values the kernel makes on the stream, at the next synchronize."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value)):
        fn("openreg")
        torch.openreg.synchronize()


@pytest.mark.parametrize("fn", [
    lambda d: torch.multinomial(torch.tensor([0.5, -0.1], device=d), 1),
    lambda d: torch.multinomial(torch.tensor([0.0, 0.0], device=d), 1),
    lambda d: torch.multinomial(torch.tensor([0.5, float("nan")], device=d), 1),
    lambda d: torch.multinomial(torch.tensor([0.5, 0.5], device=d), 3, replacement=False),
    lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)),
    lambda d: torch.empty(3, device=d).bernoulli_(-0.1),
    lambda d: torch.randint(5, 5, (3,), device=d),
    lambda d: torch.randint(9, 2, (3,), device=d),
    lambda d: torch.randperm(-1, device=d),
    lambda d: torch.empty(3, device=d).normal_(0, -1),
    lambda d: torch.empty(3, device=d).uniform_(2, 1),
    lambda d: torch.empty(3, device=d).exponential_(-1),
    lambda d: torch.empty(3, device=d).geometric_(1.5),
    lambda d: torch.empty(3, device=d, dtype=torch.int64).cauchy_(),
])
def test_bad_arguments_raise_what_cpu_raises(fn):
    raises_like_cpu(fn)


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("weights", [[0.5, -0.1], [0.5, math.nan], [0.5, math.inf], [0.0, 0.0]],
                         ids=["negative", "nan", "inf", "zero-sum"])
def test_multinomial_rejects_bad_weights_with_cpus_message(weights, replacement):
    """CPU's two paths word their checks differently; the device's kernel says what CPU says."""
    p = torch.tensor([[0.3, 0.7], weights])
    with pytest.raises(RuntimeError) as cpu:
        torch.multinomial(p, 2, replacement=replacement)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value)) + "$"):
        torch.multinomial(p.openreg(), 2, replacement=replacement)
        torch.openreg.synchronize()


@pytest.mark.parametrize("draw", ["multinomial", "bernoulli"])
def test_draws_that_check_their_probabilities_do_not_wait_for_the_device(draw):
    """multinomial and bernoulli(p) check the probabilities' values on the stream: with a long
    kernel queued, the call returns before the stream is done, and a bad probability queued that
    way is CPU's error at the synchronize. The stream works after it."""
    fn = {"multinomial": lambda p: torch.multinomial(p, 2, replacement=True), "bernoulli": torch.bernoulli}[draw]
    bad = {"multinomial": torch.tensor([[0.5, -0.1], [0.5, 0.5]]), "bernoulli": torch.tensor([0.5, 1.5])}[draw]
    with pytest.raises(RuntimeError) as cpu:
        fn(bad)
    a = torch.randn(1536, 1536, device="openreg")
    for p, is_bad in [(bad.abs().clamp(max=1.0), False), (bad, True)]:
        p = p.openreg()
        torch.openreg.synchronize()
        busy = a @ a @ a
        out = fn(p)
        assert not torch.openreg.current_stream().query(), "the draw waited for the stream"
        if is_bad:
            with pytest.raises(RuntimeError, match=re.escape(str(cpu.value).split("(Could")[0].strip().rstrip("."))):
                torch.openreg.synchronize()
        else:
            torch.openreg.synchronize()
            assert out.shape == fn(p.cpu()).shape
        del busy
    assert torch.equal((torch.ones(3, device="openreg") * 2).cpu(), torch.full((3,), 2.0))


def test_bad_states_raise_what_cpu_raises():
    for bad in (torch.zeros(10, dtype=torch.uint8), torch.zeros(16, dtype=torch.float32), [1, 2]):
        with pytest.raises(Exception) as cpu:
            torch.set_rng_state(bad)
        with pytest.raises(type(cpu.value)):
            torch.openreg.set_rng_state(bad)
    with pytest.raises(RuntimeError, match="multiple of 4"):
        torch.Generator(device="openreg").set_offset(3)


# ---------------------------------------------------------------- graphs


@pytest.fixture
def side():
    stream = torch.Stream(device="openreg")
    yield stream
    stream.synchronize()


def replays_equal_eager_draws(side, seed, draw, increment):
    """Captures `draw()` once, replays it three times: each replay draws new numbers, the ones
    an eager `draw(generator)` draws from the offset that replay took (`increment` apart)."""
    fresh(seed)
    graph = torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        out = draw(None)
        graph.capture_end()
    offset = torch.openreg.random._generator().get_offset()
    replays = []
    for _ in range(3):
        graph.replay()
        torch.accelerator.synchronize()
        replays.append(out.cpu())
    assert not torch.equal(replays[0], replays[1]) and not torch.equal(replays[1], replays[2])
    g = torch.Generator(device="openreg").manual_seed(seed)
    for i, replay in enumerate(replays):
        g.set_offset(offset + increment * i)
        assert torch.equal(draw(g).cpu(), replay)


def test_graph_replays_draw_fresh_numbers_equal_to_eager(side):
    replays_equal_eager_draws(side, 21, lambda g: torch.randn(64, device="openreg", generator=g)
                              + torch.rand(64, device="openreg", generator=g), increment=8)


def test_multinomial_is_captured_and_replayed(side):
    """multinomial reads its weights on the stream, so a graph can hold it."""
    w = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]], device="openreg")
    replays_equal_eager_draws(side, 5, lambda g: torch.multinomial(w, 64, replacement=True, generator=g), increment=4)


def test_a_capture_with_two_generators(side):
    g1 = torch.Generator(device="openreg").manual_seed(1)
    g2 = torch.Generator(device="openreg").manual_seed(2)
    graph = torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        a = torch.rand(16, device="openreg", generator=g1)
        b = torch.rand(16, device="openreg", generator=g2)
        graph.capture_end()
    graph.replay()
    torch.accelerator.synchronize()
    first = (a.cpu(), b.cpu())
    assert (g1.get_offset(), g2.get_offset()) == (4, 4)
    graph.replay()
    torch.accelerator.synchronize()
    assert not torch.equal(first[0], a.cpu()) and not torch.equal(first[1], b.cpu())
    assert torch.equal(first[0], torch.rand(16, device="openreg", generator=torch.Generator(device="openreg").manual_seed(1)).cpu())


def test_a_training_step_with_dropout_is_captured_and_replayed(side):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(32, 4)).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16, device="openreg"), torch.randn(8, 4, device="openreg")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with side:  # warm up on the side stream: the optimizer's state and the grads exist
        for _ in range(2):
            step()
    side.synchronize()
    graph = torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        loss = step()
        graph.capture_end()
    losses = []
    for _ in range(4):
        graph.replay()
        torch.accelerator.synchronize()
        losses.append(loss.item())
    assert len(set(losses)) == 4, losses  # a new dropout mask (and new weights) every replay
    assert all(math.isfinite(v) for v in losses)


def test_graphsafe_rng_state_interface():
    """torch 2.15's graph-safe RNG: AOTAutograd knows openreg (register_graphsafe_rng_device_type),
    finds torch.openreg._get_generator and default_generators, and runs an operator with a
    generator state swapped in (graphsafe_run_with_rng_state), which advances that state."""
    from torch._functorch._aot_autograd.utils import get_default_generator, supports_graphsafe_rng
    from torch._prims.rng_prims import graphsafe_run_with_rng_state

    device = torch.device("openreg:0")
    assert supports_graphsafe_rng(device)
    assert get_default_generator(device) is torch.openreg.default_generators[0]
    assert len(torch.openreg.default_generators) == 2
    with pytest.raises(IndexError):
        torch.openreg.default_generators[2]
    state = torch.Generator(device="openreg").manual_seed(3).graphsafe_get_state()
    before = torch.openreg.default_generators[0].get_offset()
    draws = [graphsafe_run_with_rng_state(torch.ops.aten.rand.default, [4], device=device, rng_state=state).cpu()
             for _ in range(2)]
    eager = torch.Generator(device="openreg").manual_seed(3)
    assert torch.equal(draws[0], torch.rand(4, device="openreg", generator=eager).cpu())
    assert torch.equal(draws[1], torch.rand(4, device="openreg", generator=eager).cpu())
    assert torch.openreg.default_generators[0].get_offset() == before  # its own state is restored
