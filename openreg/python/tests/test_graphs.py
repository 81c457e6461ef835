"""Accelerator graphs on openreg: torch.accelerator.Graph captures the work launched on a side
stream and replays it; the memory it allocates comes from a private pool; operations that
would wait for captured work are errors that leave the stream usable."""

import subprocess
import sys
import threading

import pytest
import torch


@pytest.fixture
def side():
    stream = torch.Stream(device="openreg")
    yield stream
    stream.synchronize()


def capture(stream, fn, graph=None):
    graph = graph or torch.accelerator.Graph()
    with stream:
        graph.capture_begin()
        out = fn()
        graph.capture_end()
    return graph, out


# ANCHOR: replay
def test_pointwise_and_matmul_replay_like_eager(side):
    a = torch.randn(8, 8, device="openreg")
    b = torch.randn(8, 8, device="openreg")
    graph, out = capture(side, lambda: torch.relu(a @ b + 1) * 2)
    for _ in range(3):
        a.copy_(torch.randn(8, 8))  # new inputs in the same memory
        graph.replay()
        torch.accelerator.synchronize()
        torch.testing.assert_close(out.cpu(), torch.relu(a.cpu() @ b.cpu() + 1) * 2, rtol=1e-5, atol=1e-5)
# ANCHOR_END: replay


def test_nothing_runs_during_capture_and_replays_accumulate(side):
    x = torch.zeros(5, device="openreg")
    graph, _ = capture(side, lambda: x.add_(1))
    assert x.cpu().tolist() == [0.0] * 5, "capture records, it does not run"
    for _ in range(1000):
        graph.replay()
    torch.accelerator.synchronize()
    assert x.cpu().tolist() == [1000.0] * 5


def mlp(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)


def train_step(model, optimizer, x, target):
    optimizer.zero_grad(set_to_none=False)
    out = model(x)
    loss = ((out - target) * (out - target)).mean()
    loss.backward()
    optimizer.step()
    return loss


def test_a_whole_training_step_replays_like_eager(side):
    torch.manual_seed(1)
    batches = [(torch.randn(64, 784), torch.randn(64, 10)) for _ in range(4)]
    model, optimizer = mlp("cpu")
    expected = [train_step(model, optimizer, x, t).item() for x, t in batches[1:]]

    model, optimizer = mlp("openreg")
    x, target = (t.to("openreg") for t in batches[0])  # static inputs
    with side:
        train_step(model, optimizer, x, target)  # warm-up: creates .grad
    side.synchronize()
    graph, loss = capture(side, lambda: train_step(model, optimizer, x, target))
    losses = []
    for bx, bt in batches[1:]:
        x.copy_(bx)
        target.copy_(bt)
        graph.replay()
        losses.append(loss.item())
    # The warm-up and the capture's own step did not run on CPU: replay CPU's first step too.
    cpu_model, cpu_optimizer = mlp("cpu")
    train_step(cpu_model, cpu_optimizer, *batches[0])
    expected = [train_step(cpu_model, cpu_optimizer, bx, bt).item() for bx, bt in batches[1:]]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)
    assert torch.openreg.fallback_counts() == {} or all("item" not in k for k in torch.openreg.fallback_counts())


def test_two_graphs_share_a_pool_and_a_graph_recaptures_after_reset(side):
    x = torch.ones(1000, device="openreg")
    g1, y1 = capture(side, lambda: x * 2)
    g2 = torch.accelerator.Graph(pool=g1.pool())
    g2, y2 = capture(side, lambda: y1 + 1, g2)
    assert g2.pool() == g1.pool()
    g1.replay()
    g2.replay()
    torch.accelerator.synchronize()
    assert y2.cpu()[0].item() == 3.0
    g1.reset()
    g1, y3 = capture(side, lambda: x * 5, g1)
    g1.replay()
    torch.accelerator.synchronize()
    assert y3.cpu()[0].item() == 5.0


def test_keep_graph_instantiate_and_debug_dump(side, tmp_path):
    a = torch.randn(16, 16, device="openreg")
    graph = torch.accelerator.Graph(keep_graph=True)
    graph.enable_debug_mode()
    graph, out = capture(side, lambda: (a @ a).relu(), graph)
    graph.instantiate()
    graph.replay()
    torch.accelerator.synchronize()
    torch.testing.assert_close(out.cpu(), (a.cpu() @ a.cpu()).relu(), rtol=1e-5, atol=1e-5)
    path = tmp_path / "graph.txt"
    graph.debug_dump(str(path))
    text = path.read_text()
    assert text.startswith("openreg graph: openreg:0 stream ") and "matmul::launch_matmul" in text


# ANCHOR: errors
@pytest.mark.parametrize("what", ["item", "cpu", "synchronize", "blocking copy"])
def test_waiting_for_captured_work_is_an_error_and_the_stream_stays_usable(side, what):
    x = torch.ones(4, device="openreg")
    actions = {"item": lambda: x.sum().item(), "cpu": lambda: x.cpu(),
               "synchronize": torch.accelerator.synchronize,
               "blocking copy": lambda: x.copy_(torch.zeros(4))}
    graph = torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        x.add_(1)
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            actions[what]()
        with pytest.raises(RuntimeError, match="the capture failed"):
            graph.capture_end()
        y = x + 1  # the stream works again
    assert y.cpu().tolist() == [2.0] * 4
    graph.reset()
    graph, out = capture(side, lambda: x * 3, graph)  # and can capture again
    graph.replay()
    torch.accelerator.synchronize()
    assert out.cpu().tolist() == [3.0] * 4
# ANCHOR_END: errors


def test_misuse_is_an_error(side):
    with pytest.raises(RuntimeError, match="capture on the default stream of openreg:0 is not supported"):
        torch.accelerator.Graph().capture_begin()
    graph = torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        with pytest.raises(RuntimeError, match="replay: the capture has not ended"):
            graph.replay()
        with pytest.raises(RuntimeError, match="already capturing"):
            graph.capture_begin()
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 44, device="openreg")  # in the capture's pool
        z = torch.ones(3, device="openreg") * 2
        graph.capture_end()
    graph.replay()
    torch.accelerator.synchronize()
    assert z.cpu().tolist() == [2.0] * 3
    with pytest.raises(RuntimeError, match="nothing has been captured"):
        torch.accelerator.Graph().replay()


def test_capture_modes():
    other = torch.Stream(device="openreg")

    def sync_other_in_thread():
        errors = []
        thread = threading.Thread(target=lambda: errors.append(_try(other.synchronize)))
        thread.start()
        thread.join(timeout=60)
        return errors[0]

    expected = {  # (same thread syncs another stream, another thread does) -> error?
        "global": (True, True), "thread_local": (True, False), "relaxed": (False, False)}
    for mode, (here, there) in expected.items():
        side = torch.Stream(device="openreg")
        graph = torch.accelerator.Graph(capture_error_mode=mode)
        with side:
            graph.capture_begin()
            assert (sync_other_in_thread() is not None) == there, mode
            assert (_try(other.synchronize) is not None) == here, mode
            failed = _try(graph.capture_end)
        assert (failed is not None) == (here or there), mode


def _try(fn):
    try:
        fn()
    except RuntimeError as e:
        return e
    return None


def test_a_failed_capture_in_a_child_process_does_not_hang_it():
    # A forgotten capture (no capture_end) at exit must not keep the process alive.
    code = ("import torch; s = torch.Stream(device='openreg'); g = torch.accelerator.Graph()\n"
            "with s:\n    g.capture_begin(); x = torch.ones(2, device='openreg') + 1\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_capture_queries_tell_the_truth(side):
    """torch.Stream.is_capturing() (the guard's isStreamCapturing) is true only while capturing."""
    graph = torch.accelerator.Graph()
    assert not side.is_capturing()
    with side:
        graph.capture_begin()
        during = (side.is_capturing(), torch.accelerator.current_stream().is_capturing())
        torch.ones(3, device="openreg").add_(1)
        graph.capture_end()
    assert during == (True, True)
    assert not side.is_capturing()
    assert not torch.Stream(device="openreg").is_capturing()
