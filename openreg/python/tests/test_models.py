"""The operators model families need, against CPU: convolution (the *_overrideable hooks) and
the fused recurrent cells, forward and backward, over shapes (empty, size-1, odd), layouts
(non-contiguous, channels-last), both devices and the dtypes AMP uses; bad input raises what
CPU raises; nothing reaches the CPU fallback."""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

DEVICES = ["openreg:0", "openreg:1"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=2e-2, atol=2e-2),
       torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


class NoFallback:
    """Fails if an operator named in `names` (all, if empty) reached the CPU fallback."""

    def __init__(self, *names):
        self.names = names

    def __enter__(self):
        self.before = dict(torch.openreg.fallback_counts())

    def __exit__(self, *exc):
        after = torch.openreg.fallback_counts()
        new = {op: n for op, n in after.items() if n != self.before.get(op, 0)}
        if self.names:
            new = {op: n for op, n in new.items() if any(name in op for name in self.names)}
        assert not new, f"reached the CPU fallback: {new}"


def same_error(fn, *inputs, device="openreg:0"):
    """`fn` raises the same exception class with the same message on CPU and on the device."""
    with pytest.raises(Exception) as cpu:
        fn(*inputs)
    with pytest.raises(type(cpu.value)) as dev:
        fn(*[t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs])
    assert str(dev.value).replace(device, "cpu") == str(cpu.value), (dev.value, cpu.value)


def grads_against_cpu(fn, tensors, device, dtype):
    """`fn` forward and backward on the device in `dtype` against CPU in float32 on the same
    (rounded) values: the result and every input's gradient."""
    rounded = [t.to(dtype) if t is not None else None for t in tensors]
    cpu = [t.float().detach().requires_grad_() if t is not None else None for t in rounded]
    dev = [t.detach().to(device).requires_grad_() if t is not None else None for t in rounded]
    expected = fn(*cpu)
    with NoFallback("conv", "lstm", "gru"):
        got = fn(*dev)
    assert got.device == torch.device(device) and got.dtype == dtype
    torch.testing.assert_close(got.float().cpu(), expected, **TOL[dtype])
    grad = torch.randn(expected.shape).to(dtype)
    expected.backward(grad.float())
    got.backward(grad.to(device))
    for c, d in zip(cpu, dev):
        if c is not None:
            torch.testing.assert_close(d.grad.float().cpu(), c.grad, **TOL[dtype])


# (function, input, weight, bias, keyword arguments)
CONVOLUTIONS = [
    (F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3), (4,), {}),
    (F.conv2d, (2, 3, 9, 7), (4, 3, 3, 3), None, dict(stride=2, padding=1)),
    (F.conv2d, (1, 4, 9, 7), (6, 2, 3, 2), (6,), dict(groups=2, dilation=(2, 1), padding=(1, 2))),
    # depthwise: channels 16 at a time, one per lane of a padded plane's elements; a last
    # block of fewer, kernels wider than the plane, strides, dilation, 3-D
    (F.conv2d, (3, 4, 5, 5), (4, 1, 3, 3), None, dict(groups=4, padding="same")),
    (F.conv2d, (2, 24, 4, 4), (24, 1, 7, 7), (24,), dict(groups=24, padding=3)),  # kernel wider than the plane
    (F.conv2d, (2, 6, 11, 9), (6, 1, 5, 5), (6,), dict(groups=6, padding=2, stride=2)),
    (F.conv2d, (1, 5, 9, 10), (5, 1, 3, 3), None, dict(groups=5, padding=(1, 3), dilation=(2, 3))),
    (F.conv3d, (2, 3, 4, 5, 6), (3, 1, 3, 3, 3), (3,), dict(groups=3, padding=1, stride=(2, 1, 1))),
    (F.conv2d, (3, 4, 6, 6), (4, 4, 2, 2), (4,), dict(padding="same")),  # uneven 'same'
    (F.conv2d, (2, 8, 5, 5), (16, 8, 1, 1), (16,), {}),  # 1x1: no im2col
    (F.conv2d, (1, 1, 1, 1), (1, 1, 1, 1), (1,), {}),
    (F.conv2d, (0, 3, 8, 8), (4, 3, 3, 3), (4,), {}),  # empty batch
    (F.conv2d, (2, 3, 3, 3), (5, 3, 3, 3), (5,), {}),  # kernel = input: one position
    # 3x3, unit stride, 32+ channels each side and planes of 128+ tiles (2x2 outputs): the
    # forward takes the Winograd path, and so does the input gradient (a convolution with the
    # flipped weight); smaller planes take im2col
    (F.conv2d, (2, 32, 23, 21), (32, 32, 3, 3), (32,), dict(padding=1)),  # odd sizes: partial tiles
    (F.conv2d, (1, 256, 24, 21), (256, 128, 3, 3), None, dict(groups=2, padding=(0, 2))),
    (F.conv2d, (2, 128, 3, 3), (130, 128, 3, 3), (130,), dict(padding=3)),  # im2col; more padding than input (input gradient: col2im)
    (F.conv2d, (2, 128, 1, 1), (128, 128, 3, 3), None, dict(padding=1)),  # one output position
    (F.conv2d, (1, 32, 22, 24), (32, 32, 3, 3), None, dict(padding=2)),  # its input gradient: padding 0
    (F.conv2d, (1, 33, 23, 25), (35, 33, 3, 3), (35,), dict(padding=1)),  # one sample over the threads, uneven shares
    # planes under 64 positions (a network's last stages): samples side by side in one
    # product, a single sample included; few columns: the weight's rows read in place, split
    # over the threads; more samples than one product takes: several, summed per group
    (F.conv2d, (1, 64, 2, 2), (128, 64, 3, 3), (128,), dict(padding=1)),
    (F.conv2d, (1, 128, 2, 2), (64, 128, 1, 1), None, {}),
    (F.conv2d, (70, 8, 2, 2), (8, 4, 3, 3), (8,), dict(padding=1, groups=2)),
    (F.conv1d, (2, 3, 10), (5, 3, 3), (5,), dict(stride=2)),
    (F.conv1d, (2, 4, 11), (4, 2, 4), None, dict(groups=2, padding="same", dilation=2)),
    (F.conv3d, (2, 2, 5, 6, 4), (3, 2, 3, 2, 2), (3,), dict(padding=1, stride=(1, 2, 1))),
    (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 3, 3), (3,), dict(stride=2, padding=1, output_padding=1)),
    (F.conv_transpose2d, (2, 4, 5, 5), (4, 2, 3, 3), (4,), dict(stride=2, groups=2, dilation=2)),
    (F.conv_transpose1d, (2, 4, 7), (4, 3, 3), None, dict(stride=3)),
    (F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), (3,), dict(stride=2)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONVOLUTIONS, ids=lambda c: f"{c[0].__name__}{c[1]}{c[2]}{c[4]}")
def test_convolution_forward_and_backward(case, dtype, device):
    fn, x, w, b, kwargs = case
    tensors = [torch.randn(x), torch.randn(w), torch.randn(b) if b else None]
    grads_against_cpu(lambda x, w, b: fn(x, w, b, **kwargs), tensors, device, dtype)


@pytest.mark.parametrize("channels", [6, 65], ids=["im2col", "winograd"])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last", "channels_last_weight"])
def test_convolution_of_other_layouts(layout, channels):
    plane = (7, 9) if channels < 32 else (23, 25)  # Winograd: 32+ channels, 128+ tiles
    x, w, b = torch.randn(2, channels, *plane), torch.randn(channels - 1, channels, 3, 3), torch.randn(channels - 1)
    views = {
        "transposed": lambda x, w: (x.transpose(2, 3), w.transpose(2, 3)),
        "sliced": lambda x, w: (x[:, ::2, 1:, ::2], w[:, ::2]),
        "channels_last": lambda x, w: (x.contiguous(memory_format=torch.channels_last), w),
        "channels_last_weight": lambda x, w: (x, w.contiguous(memory_format=torch.channels_last)),
    }[layout]
    expected = F.conv2d(*views(x, w), b, padding=1)
    xd, wd = x.openreg().requires_grad_(), w.openreg().requires_grad_()
    got = F.conv2d(*views(xd, wd), b.openreg(), padding=1)
    torch.testing.assert_close(got.cpu(), expected, **TOL[torch.float32])
    got.sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.conv2d(*views(xc, wc), b, padding=1).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **TOL[torch.float32])
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, **TOL[torch.float32])


def test_convolution_of_other_dtypes_runs_on_the_host_counted():
    x, w = torch.randn(2, 3, 5, 5, dtype=torch.float64), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    xd, wd = x.openreg().requires_grad_(), w.openreg().requires_grad_()
    got = F.conv2d(xd, wd, padding=1)
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, padding=1))
    got.sum().backward()
    xc = x.clone().requires_grad_()
    F.conv2d(xc, w, padding=1).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    counts = torch.openreg.fallback_counts()
    assert any("convolution_overrideable" in op for op in counts), counts


def test_convolution_bad_input_raises_what_cpu_raises():
    x, w = torch.ones(1, 3, 5, 5), torch.ones(4, 3, 3, 3)
    same_error(F.conv2d, x, torch.ones(4, 2, 3, 3))  # wrong channel count
    same_error(F.conv2d, torch.ones(1, 3, 2, 2), w)  # kernel larger than the padded input
    same_error(lambda x, w: F.conv2d(x, w, padding=-1), x, w)
    same_error(lambda x, w: F.conv2d(x, w, stride=0), x, w)
    same_error(lambda x, w: F.conv2d(x, w, dilation=0), x, w)
    same_error(lambda x, w: F.conv2d(x, w, groups=3), x, torch.ones(4, 1, 3, 3))
    same_error(F.conv2d, x, w, torch.ones(3))  # bias of the wrong size
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose2d(x.openreg(), torch.ones(3, 4, 3, 3).openreg(), output_padding=2)
    with pytest.raises(RuntimeError, match="same device"):
        F.conv2d(x.openreg(), w)


def test_conv_layers_under_autocast_with_grad_scaler():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(1, 3, 8, 8))
    device = copy.deepcopy(model).openreg()
    x, y = torch.randn(4, 3, 8, 8), torch.randn(4, 2)
    scaler = torch.amp.GradScaler("openreg")
    optimizer = torch.optim.SGD(device.parameters(), lr=0.1)
    with torch.autocast("openreg", dtype=torch.float16):
        h = device[0](x.openreg())
        assert h.dtype == torch.float16  # conv is on autocast's lower-precision list
        loss = F.mse_loss(device(x.openreg()).float(), y.openreg())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    expected = F.mse_loss(model(x), y)
    torch.testing.assert_close(loss.cpu(), expected, rtol=2e-2, atol=2e-2)
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in device.parameters())


RNNS = {
    "lstm": lambda: nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True),
    "gru": lambda: nn.GRU(5, 7, num_layers=2, bidirectional=True),
    "lstm_no_bias": lambda: nn.LSTM(5, 7, bias=False),
    "gru_no_bias": lambda: nn.GRU(5, 1, bias=False),
    "lstm_cell": lambda: nn.LSTMCell(5, 7),
    "gru_cell": lambda: nn.GRUCell(5, 7),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", RNNS)
def test_recurrent_modules_train_like_cpu(name, dtype, device):
    torch.manual_seed(0)
    cpu = RNNS[name]()
    dev = copy.deepcopy(cpu).to(device, dtype)
    cpu = copy.deepcopy(dev).cpu().float()  # the same rounded weights
    shape = (3, 5) if "cell" in name else (3, 4, 5)
    x = torch.randn(shape).to(dtype)
    outputs = []
    for model, inp in [(cpu, x.float()), (dev, x.to(device))]:
        with NoFallback("lstm", "gru"):
            out = model(inp)
        out = out[0] if isinstance(out, tuple) else out
        out.float().pow(2).sum().backward()
        outputs.append(out)
    torch.testing.assert_close(outputs[1].float().cpu(), outputs[0], **TOL[dtype])
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.float().cpu(), p.grad, **TOL[dtype])


def test_recurrent_cells_with_states_and_empty_batches():
    torch.manual_seed(0)
    lstm, gru = nn.LSTM(4, 6), nn.GRU(4, 6, num_layers=2)
    h, c = torch.randn(1, 3, 6), torch.randn(1, 3, 6)
    x = torch.randn(5, 3, 4)
    for model, state in [(lstm, (h, c)), (gru, torch.randn(2, 3, 6))]:
        dev = copy.deepcopy(model).openreg()
        dstate = tuple(t.openreg() for t in state) if isinstance(state, tuple) else state.openreg()
        expected, got = model(x, state), dev(x.openreg(), dstate)
        torch.testing.assert_close(got[0].cpu(), expected[0], **TOL[torch.float32])
        torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), got[1]), expected[1],
                                   **TOL[torch.float32])
    # An empty batch, and the cells' operators called directly with and without biases.
    assert nn.LSTMCell(4, 6).openreg()(torch.randn(0, 4).openreg())[0].shape == (0, 6)
    gates, cx = torch.randn(3, 24), torch.randn(3, 6)
    bias = torch.randn(24)
    for biases in [(), (bias, bias * 2)]:
        hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(gates.openreg(), gates.openreg(), cx.openreg(),
                                                         *[b.openreg() for b in biases])
        total = gates * 2 + (bias * 3 if biases else 0)
        i, f, g, o = total.chunk(4, 1)
        c = i.sigmoid() * g.tanh() + f.sigmoid() * cx
        torch.testing.assert_close(cy.cpu(), c)
        torch.testing.assert_close(hy.cpu(), o.sigmoid() * c.tanh())


# (input size, hidden size, layers, bidirectional, batch_first, bias, time, batch, initial state)
LSTM_LAYERS = [
    (4, 6, 1, False, False, True, 5, 3, True),
    (4, 6, 2, True, True, True, 5, 3, True),
    (7, 5, 3, False, True, True, 6, 2, False),
    (3, 8, 2, True, False, False, 4, 3, True),
    (4, 6, 2, True, False, True, 1, 1, True),  # one step, one sample
    (1, 1, 1, False, False, True, 3, 2, True),  # one feature, one unit
    (5, 9, 1, False, False, True, 33, 7, False),  # odd sizes, longer sequence
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", LSTM_LAYERS, ids=str)
def test_lstm_layer_kernel_matches_cpu(config, device):
    """nn.LSTM in float32 runs one autograd node per layer and direction (LSTM.cpp), not the
    per-step composite: outputs, final states and every gradient against CPU, no fallback."""
    inp, hidden, layers, bidirectional, batch_first, bias, time, batch, state = config
    torch.manual_seed(0)
    cpu = nn.LSTM(inp, hidden, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional)
    dev = copy.deepcopy(cpu).to(device)
    shape = (batch, time, inp) if batch_first else (time, batch, inp)
    x = torch.randn(shape)
    states = [torch.randn(layers * (2 if bidirectional else 1), batch, hidden) for _ in range(2)]
    results = []
    for model, where in [(cpu, "cpu"), (dev, device)]:
        xs = x.detach().to(where).requires_grad_()
        hs = [t.detach().to(where).requires_grad_() for t in states]
        with NoFallback():
            y, (hn, cn) = model(xs, tuple(hs)) if state else model(xs)
            torch.manual_seed(1)
            loss = sum((t * torch.randn(t.shape).to(where)).sum() for t in (y, hn, cn))
            loss.backward()
        results.append([y, hn, cn, xs.grad] + ([t.grad for t in hs] if state else [])
                       + [p.grad for p in model.parameters()])
        if where != "cpu":
            names, todo = set(), [y.grad_fn]
            while todo:
                fn = todo.pop()
                if fn is not None and fn.name() not in names:
                    names.add(fn.name())
                    todo.extend(f for f, _ in fn.next_functions)
            assert any("LstmLayer" in n for n in names), names
            assert not any("FusedLstm" in n or "Linear" in n for n in names), names
    for expected, got in zip(*results):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_lstm_layer_kernel_other_paths():
    """Non-contiguous input, an input that needs no gradient, no_grad and inference_mode,
    dropout between layers, projections (PyTorch's composite), and double backward (refused)."""
    torch.manual_seed(0)
    cpu = nn.LSTM(4, 6, 2, bidirectional=True)
    dev = copy.deepcopy(cpu).openreg()
    x = torch.randn(3, 5, 4).transpose(0, 1)  # [5, 3, 4], not contiguous
    expected = cpu(x)[0]
    torch.testing.assert_close(dev(x.openreg())[0].cpu(), expected, rtol=1e-4, atol=1e-5)
    dev(x.openreg())[0].sum().backward()
    cpu(x)[0].sum().backward()
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(dev(x.openreg())[0].cpu(), expected, rtol=1e-4, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(dev(x.openreg())[0].cpu(), expected, rtol=1e-4, atol=1e-5)
    # Dropout between layers: applied in training (outputs differ from eval), not in eval.
    cpu_d = nn.LSTM(4, 6, 3, dropout=0.5)
    dev_d = copy.deepcopy(cpu_d).openreg()
    torch.testing.assert_close(dev_d.eval()(x.openreg())[0].cpu(), cpu_d.eval()(x)[0], rtol=1e-4, atol=1e-5)
    y = dev_d.train()(x.openreg())[0]
    y.sum().backward()
    assert y.shape == (5, 3, 6) and not torch.allclose(y.cpu(), cpu_d(x)[0])
    assert all(torch.isfinite(p.grad).all() for p in dev_d.parameters())
    # Projections are not ours: PyTorch's per-step composite runs them, still like CPU.
    cpu_p = nn.LSTM(4, 6, 2, proj_size=3)
    dev_p = copy.deepcopy(cpu_p).openreg()
    torch.testing.assert_close(dev_p(x.openreg())[0].cpu(), cpu_p(x)[0], rtol=1e-4, atol=1e-5)
    # The layer's backward is not itself differentiable: a clear error, never a silent zero.
    xs = x.openreg().requires_grad_()
    (grad,) = torch.autograd.grad(dev(xs)[0].pow(2).sum(), xs, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_runs_on_the_device(dtype, device):
    """native_dropout and its backward in the Rust kernel: the share kept, kept values scaled,
    the gradient through the same mask, reproducible from the device's seed, no fallback."""
    torch.manual_seed(0)
    x = torch.randn(300, 333).to(dtype)
    x[0, :4] = torch.tensor([float("nan"), float("inf"), 0.0, -1.0])
    d = x.to(device).requires_grad_()
    torch.openreg.manual_seed_all(7)  # each device has its generator
    with NoFallback():
        y, mask = torch.native_dropout(d, 0.3, True)
        y.backward(torch.ones_like(y))
        torch.openreg.manual_seed_all(7)
        again = F.dropout(d, 0.3, training=True)
        other = F.dropout(d, 0.3, training=True)
    mask = mask.cpu()
    assert mask.dtype == torch.bool and abs(mask.float().mean().item() - 0.7) < 0.01
    # As CPU computes it, input * mask / keep: NaN stays NaN, an infinity dropped is NaN.
    expected = x.float() * mask / 0.7
    torch.testing.assert_close(y.detach().cpu().float(), expected, equal_nan=True, **TOL[dtype])
    torch.testing.assert_close(d.grad.cpu().float(), mask.float() / 0.7, **TOL[dtype])
    assert torch.equal(again.detach().cpu().isnan(), y.detach().cpu().isnan())
    torch.testing.assert_close(again.detach().cpu(), y.detach().cpu(), equal_nan=True, rtol=0, atol=0)
    assert not torch.equal(other.detach().cpu() != 0, again.detach().cpu() != 0)
    # No dropout in eval, none at p=0, everything at p=1; an empty tensor.
    torch.testing.assert_close(F.dropout(d, 0.3, training=False).detach().cpu(), x, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(F.dropout(d, 0.0, training=True).detach().cpu(), x, equal_nan=True, rtol=0, atol=0)
    assert not F.dropout(d, 1.0, training=True).detach().cpu().nan_to_num().any()
    assert F.dropout(torch.empty(0, 3, dtype=dtype, device=device), 0.5).shape == (0, 3)


def test_dropout_trains_a_transformer_and_is_captured():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).openreg()  # dropout 0.1
    opt = torch.optim.AdamW(layer.parameters())
    x = torch.randn(4, 8, 32).openreg()
    with NoFallback():  # dropout layers, and dropout inside attention
        for _ in range(2):
            opt.zero_grad()
            out = layer(x)
            (out * out).mean().backward()
            opt.step()
    torch.openreg.synchronize()
    assert all(torch.isfinite(p).all() for p in layer.parameters())
    # A captured dropout draws a new mask at every replay (test_random.py covers the numbers).
    side, graph = torch.Stream(device="openreg"), torch.accelerator.Graph()
    with side:
        graph.capture_begin()
        y = F.dropout(x, 0.5)
        graph.capture_end()
    masks = []
    for _ in range(2):
        graph.replay()
        torch.accelerator.synchronize()
        masks.append((y.cpu() != 0))
    assert not torch.equal(masks[0], masks[1])
    side.synchronize()


def test_recurrent_bad_input_raises_clear_errors():
    lstm = nn.LSTM(4, 6)
    x = torch.randn(5, 3, 4)
    bad = (torch.randn(1, 2, 6), torch.randn(1, 3, 6))  # hidden batch 2, input batch 3
    same_error(lambda x, h, c: copy.deepcopy(lstm).to(x.device)(x, (h, c)), x, *bad)
    same_error(lambda x, h: nn.GRUCell(4, 6).to(x.device)(x, h), torch.randn(3, 4), torch.randn(2, 6))
    same_error(lambda x, h: nn.GRU(4, 6).to(x.device)(x, h), x, torch.randn(1, 3, 5))
    dev = lambda *shape, dtype=torch.float32: torch.randn(*shape, dtype=dtype).openreg()
    with pytest.raises(RuntimeError, match=r"cx of size \[2, 2\], got \[3, 2\]"):
        torch.ops.aten._thnn_fused_lstm_cell(dev(2, 8), dev(2, 8), dev(3, 2))
    with pytest.raises(RuntimeError, match=r"hidden_gates of the size of input_gates"):
        torch.ops.aten._thnn_fused_gru_cell(dev(2, 6), dev(2, 9), dev(2, 2))
    with pytest.raises(RuntimeError, match=r"biases of size \[6\]"):
        torch.ops.aten._thnn_fused_gru_cell(dev(2, 6), dev(2, 6), dev(2, 2), dev(5), dev(5))
    with pytest.raises(NotImplementedError, match="not Double"):
        d = lambda *s: dev(*s, dtype=torch.float64)
        torch.ops.aten._thnn_fused_lstm_cell(d(2, 8), d(2, 8), d(2, 2))
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.aten._thnn_fused_gru_cell(dev(2, 6), dev(2, 6), torch.randn(2, 2))


NORMS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), lambda x: (x.shape[-1],)),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, x.shape[-2:], w, b), lambda x: x.shape[-2:]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), lambda x: (x.shape[1],)),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), lambda x: (x.shape[1],)),
    "batch_norm_eval": (lambda x, w, b: F.batch_norm(x, torch.linspace(-1, 1, x.shape[1], device=x.device),
                                                     torch.linspace(0.5, 2, x.shape[1], device=x.device), w, b),
                        lambda x: (x.shape[1],)),
}


def valid_norm_cases():
    """(name, shape) pairs CPU accepts: training statistics need more than one value per set."""
    for name in NORMS:
        # (5, 38) and (2, 4, 64): rows long enough for the 16-lane loops, and a tail
        for shape in [(4, 6), (3, 4, 5), (2, 4, 3, 5), (1, 2, 1, 1), (0, 4, 3), (5, 38), (2, 4, 64)]:
            per_set = {"batch_norm_train": shape[0] * math.prod(shape[2:]), "group_norm": math.prod(shape[1:]) // 2}
            if per_set.get(name, 2) > 1 and not (name == "layer_norm_2d" and len(shape) < 3):
                yield name, shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("name,shape", list(valid_norm_cases()), ids=str)
def test_normalization_forward_and_backward(name, shape, affine, dtype, device):
    fn, params = NORMS[name]
    torch.manual_seed(0)
    x = torch.randn(shape) * 3 + 1
    w, b = (torch.randn(params(x)), torch.randn(params(x))) if affine else (None, None)
    if shape[0] == 0:
        with NoFallback("norm"):
            got = fn(x.to(device, dtype), *(t.to(device, dtype) if t is not None else None for t in (w, b)))
        assert got.shape == shape
        return
    grads_against_cpu(lambda x, w, b: fn(x, w, b), [x, w, b], device, dtype)


def test_layer_norm_parameter_gradients_alone():
    # Without an input gradient the backward computes only the weight's and the bias's.
    x, w, b = torch.randn(7, 40), torch.randn(40), torch.randn(40)
    grads = {}
    for device in ["cpu", "openreg"]:
        wd, bd = w.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        F.layer_norm(x.to(device), (40,), wd, bd).pow(2).sum().backward()
        grads[device] = (wd.grad.cpu(), bd.grad.cpu())
    for got, expected in zip(grads["openreg"], grads["cpu"]):
        torch.testing.assert_close(got, expected)


def test_normalization_of_other_layouts_and_mixed_dtypes():
    x = torch.randn(2, 4, 5, 6)
    for view in [lambda t: t.transpose(1, 3), lambda t: t.contiguous(memory_format=torch.channels_last),
                 lambda t: t[:, :, ::2]]:
        for fn in [lambda t: F.layer_norm(t, t.shape[-1:]), lambda t: F.group_norm(t, 2),
                   lambda t: F.batch_norm(t, None, None, training=True)]:
            with NoFallback("norm"):
                got = fn(view(x.openreg()))
            torch.testing.assert_close(got.cpu(), fn(view(x)), **TOL[torch.float32])
    # float16 input with float32 parameters: float32 statistics, as on CPU
    w, b = torch.randn(6), torch.randn(6)
    out, mean, rstd = torch.native_layer_norm(x.half().openreg(), [6], w.openreg(), b.openreg(), 1e-5)
    cpu = torch.native_layer_norm(x.half(), [6], w, b, 1e-5)
    assert (out.dtype, mean.dtype, mean.shape) == (cpu[0].dtype, cpu[1].dtype, cpu[1].shape)
    torch.testing.assert_close(out.cpu(), cpu[0], **TOL[torch.float16])


def test_batch_norm_updates_running_statistics_in_place():
    torch.manual_seed(0)
    cpu = nn.BatchNorm2d(4, momentum=0.3)
    dev = copy.deepcopy(cpu).openreg()
    mean_before = dev.running_mean
    for _ in range(3):
        x = torch.randn(5, 4, 3, 3)
        with NoFallback("batch_norm"):
            dev(x.openreg())
        cpu(x)
    assert dev.running_mean is mean_before  # the same buffer, updated in place
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)
    cpu.eval(), dev.eval()
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(dev(x.openreg()).cpu(), cpu(x), **TOL[torch.float32])
    # a non-contiguous running buffer is updated too
    rm, rv = torch.zeros(8)[::2], torch.ones(8)[::2]
    drm, drv = torch.zeros(8).openreg()[::2], torch.ones(8).openreg()[::2]
    F.batch_norm(x, rm, rv, training=True, momentum=0.5)
    F.batch_norm(x.openreg(), drm, drv, training=True, momentum=0.5)
    torch.testing.assert_close(drm.cpu(), rm)
    torch.testing.assert_close(drv.cpu(), rv)


def test_normalization_bad_input_raises_what_cpu_raises():
    x = torch.randn(2, 4, 5)
    same_error(lambda x: F.layer_norm(x, (6,)), x)
    same_error(lambda x, w: F.layer_norm(x, (5,), w), x, torch.ones(4))
    same_error(lambda x: F.group_norm(x, 3), x)
    same_error(lambda x, w: F.group_norm(x, 2, w), x, torch.ones(3))
    same_error(lambda x, m, v: F.batch_norm(x, m, v), x, torch.zeros(3), torch.ones(4))
    same_error(lambda x: F.batch_norm(x, None, None, training=True), torch.randn(1, 4))
    with pytest.raises(RuntimeError, match="same device"):
        F.layer_norm(x.openreg(), (5,), torch.ones(5))


POOLS = {
    "max": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max_dilated_ceil": lambda x: F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True),
    "max_rect": lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 0)),
    # windows that tile the rows: whole 2x2 / 3x3 windows in registers, padded edges apart
    "max_2x2": lambda x: F.max_pool2d(x, 2),
    "max_2x2_ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    "max_3x3_tiled_padded": lambda x: F.max_pool2d(x, 3, 3, 1),
    "avg": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_exclude_pad_ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    "adaptive": lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    "adaptive_up": lambda x: F.adaptive_avg_pool2d(x, (10, 11)),
    "adaptive_1x1": lambda x: F.adaptive_avg_pool2d(x, 1),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7), (1, 1, 4, 4), (0, 2, 5, 5)], ids=str)
@pytest.mark.parametrize("name", POOLS)
def test_pooling_forward_and_backward(name, shape, dtype, device):
    torch.manual_seed(0)
    x = torch.randn(shape)
    if shape[0] == 0:
        with NoFallback("pool"):
            assert POOLS[name](x.to(device, dtype)).shape == POOLS[name](x).shape
        return
    grads_against_cpu(lambda x: POOLS[name](x), [x], device, dtype)


def test_pooling_layouts_indices_out_and_nan():
    x = torch.randn(2, 3, 8, 8)
    for view in [lambda t: t.contiguous(memory_format=torch.channels_last), lambda t: t.transpose(2, 3),
                 lambda t: t[:, :, 1:, ::2]]:
        for name in ["max", "avg", "adaptive"]:
            with NoFallback("pool"):
                got = POOLS[name](view(x.openreg()))
            torch.testing.assert_close(got.cpu(), POOLS[name](view(x)))
    out, indices = F.max_pool2d(x.openreg(), 2, return_indices=True)
    expected = F.max_pool2d(x, 2, return_indices=True)
    assert indices.dtype == torch.int64 and torch.equal(indices.cpu(), expected[1])
    o, i = torch.empty(0, device="openreg"), torch.empty(0, dtype=torch.int64, device="openreg")
    torch.ops.aten.max_pool2d_with_indices.out(x.openreg(), [2, 2], out=o, indices=i)
    assert torch.equal(o.cpu(), expected[0]) and torch.equal(i.cpu(), expected[1])
    o = torch.empty(0, device="openreg")
    torch.ops.aten.avg_pool2d.out(x.openreg(), [2, 2], out=o)
    torch.testing.assert_close(o.cpu(), F.avg_pool2d(x, 2))
    nan = torch.tensor([[[[1.0, float("nan")], [float("nan"), 2.0]]]])
    got = torch.ops.aten.max_pool2d_with_indices(nan.openreg(), [2, 2])
    expected = torch.ops.aten.max_pool2d_with_indices(nan, [2, 2])
    assert got[0].isnan().all() and torch.equal(got[1].cpu(), expected[1])
    # Ties keep the first tap, all -inf windows report their first tap, as on CPU.
    for x in [torch.zeros(1, 2, 6, 9), torch.full((1, 1, 6, 6), float("-inf")), torch.randn(1, 1, 6, 6).round()]:
        for kernel, stride, padding in [(2, 2, 0), (3, 3, 1), (3, 3, 0)]:
            got = torch.ops.aten.max_pool2d_with_indices(x.openreg(), [kernel] * 2, [stride] * 2, [padding] * 2)
            expected = torch.ops.aten.max_pool2d_with_indices(x, [kernel] * 2, [stride] * 2, [padding] * 2)
            assert torch.equal(got[0].cpu(), expected[0]) and torch.equal(got[1].cpu(), expected[1]), (x, kernel)


def test_pooling_bad_input_raises_what_cpu_raises():
    x = torch.randn(1, 2, 5, 5)
    same_error(lambda x: F.max_pool2d(x, 2, stride=0), x)
    same_error(lambda x: F.max_pool2d(x, 2, padding=2), x)  # padding above half the kernel
    same_error(lambda x: F.max_pool2d(x, 7), x)  # window larger than the input
    same_error(lambda x: F.avg_pool2d(x, 2, padding=-1), x)
    same_error(lambda x: F.avg_pool2d(x, 0), x)
    same_error(lambda x: F.adaptive_avg_pool2d(x, (2, -1)), x)
    same_error(lambda x: F.adaptive_avg_pool2d(x, 2), torch.randn(2, 3, 0, 4))
    same_error(lambda x: F.max_pool2d(x, 2), torch.randn(5, 5))


OPTIMIZERS = {
    "sgd_momentum": (torch.optim.SGD, dict(momentum=0.9, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(momentum=0.9, nesterov=True)),
    "sgd_plain": (torch.optim.SGD, dict(maximize=True)),
    "adam": (torch.optim.Adam, dict(weight_decay=0.01)),
    "adam_amsgrad": (torch.optim.Adam, dict(amsgrad=True, maximize=True)),
    "adamw": (torch.optim.AdamW, dict()),
}
MODES = {"foreach": dict(foreach=True), "single": dict(foreach=False), "fused": dict(fused=True)}


def optimize(cls, kwargs, params, grads, device):
    params = [p.clone().to(device).requires_grad_() for p in params]
    opt = cls(params, lr=0.1, **kwargs)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone().to(device)
        opt.step()
    return params, opt


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers_step_on_the_device_like_cpu(name, mode):
    cls, kwargs = OPTIMIZERS[name]
    torch.manual_seed(0)
    # contiguous, a transposed (non-contiguous) parameter, an odd size, one element
    params = [torch.randn(4, 3), torch.randn(5, 2).t(), torch.randn(7), torch.randn(1)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(3)]
    expected, _ = optimize(cls, {**kwargs, **MODES[mode]}, params, grads, "cpu")
    watch = NoFallback()
    with watch:
        got, opt = optimize(cls, {**kwargs, **MODES[mode]}, params, grads, "openreg")
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
    assert g.device == torch.device("openreg:0")


def test_fused_optimizers_on_two_devices_and_bad_input():
    torch.manual_seed(0)
    params = [torch.randn(3, 3), torch.randn(4)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(2)]
    expected, _ = optimize(torch.optim.AdamW, dict(fused=True), params, grads, "cpu")
    # one parameter on each device: the optimizer groups them and calls the kernel per device
    ps = [params[0].clone().openreg(0).requires_grad_(), params[1].clone().openreg(1).requires_grad_()]
    opt = torch.optim.AdamW(ps, lr=0.1, fused=True)
    for step in grads:
        for p, g in zip(ps, step):
            p.grad = g.clone().to(p.device)
        opt.step()
    for e, g in zip(expected, ps):
        torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
    # called directly with tensors of two devices: the error names them
    a, b = torch.randn(3).openreg(0), torch.randn(3).openreg(1)
    step = torch.ones((), device="openreg:0")
    with pytest.raises(RuntimeError, match="same device"):
        torch._fused_adam_([a], [b], [a.clone()], [a.clone()], [], [step], lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(RuntimeError, match="to have 1 tensors, got 2"):
        torch._fused_sgd_([a], [a, a], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=True)


def test_grad_scaler_skips_inf_steps_and_updates_its_scale_like_cpu():
    results = []
    for device in ["cpu", "openreg"]:
        torch.manual_seed(1)
        w = torch.randn(4, 3).to(device).requires_grad_()
        opt = torch.optim.Adam([w], lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=2)
        scales = []
        for i in range(5):
            x = torch.randn(5, 4).to(device)
            loss = (x @ w).square().sum() * (float("inf") if i == 1 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        results.append((w.detach().cpu(), scales))
    torch.testing.assert_close(results[1][0], results[0][0])
    assert results[1][1] == results[0][1]  # backed off at the inf, grew after two clean steps


def test_hardtanh_mse_loss_embedding_and_cat_like_cpu():
    x = torch.tensor([float("nan"), -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    for fn in [F.hardtanh, F.relu6, lambda t: F.hardtanh(t, -0.5, 2.0)]:
        a, b = x.clone().requires_grad_(), x.openreg().requires_grad_()
        with NoFallback("hardtanh"):
            out = fn(b)
            out.nansum().backward()
        expected = fn(a)
        expected.nansum().backward()
        torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
        torch.testing.assert_close(b.grad.cpu(), a.grad, equal_nan=True)
    y = x.openreg()
    F.hardtanh_(y)
    torch.testing.assert_close(y.cpu(), F.hardtanh(x), equal_nan=True)
    a, t = torch.randn(3, 5), torch.randn(3, 5)
    for reduction in ["mean", "sum", "none"]:
        grads_against_cpu(lambda a, t: F.mse_loss(a, t, reduction=reduction), [a, t], "openreg:1", torch.float32)
    same_error(lambda a, t: F.mse_loss(a, t, reduction="bad"), a, t)
    weight, idx = torch.randn(10, 4), torch.tensor([[1, 2, 1], [9, 0, 2]])
    for kwargs in [{}, dict(padding_idx=2), dict(scale_grad_by_freq=True)]:
        cpu, dev = weight.clone().requires_grad_(), weight.openreg().requires_grad_()
        with NoFallback():
            out = F.embedding(idx.openreg(), dev, **kwargs)
            out.sum().backward()
        expected = F.embedding(idx, cpu, **kwargs)
        expected.sum().backward()
        torch.testing.assert_close(out.cpu(), expected)
        torch.testing.assert_close(dev.grad.cpu(), cpu.grad)
    # An index out of range: CPU's IndexError and message at the call; the device reads the
    # index on the stream and reports it from there (at the call when the stream was idle, else
    # at the synchronize), as a GPU reports a device-side assert.
    for bad in [-1, 10]:
        with pytest.raises(IndexError, match="^index out of range in self$"):
            F.embedding(torch.tensor([bad]), weight)
        with pytest.raises(IndexError, match="index out of range in self$"):
            F.embedding(torch.tensor([bad]).openreg(), weight.openreg())
            torch.openreg.synchronize()
    same_error(lambda w, i: torch.index_select(w, 0, i), weight, torch.tensor([[1]]))
    for dim in [0, 1, -1]:
        check_t = torch.randn(4, 6, 2)
        torch.testing.assert_close(torch.index_select(check_t.openreg(), dim, torch.tensor([1, 0, 1]).openreg()).cpu(),
                                   torch.index_select(check_t, dim, torch.tensor([1, 0, 1])))
    parts = [torch.randn(2, 3), torch.randn(2, 0), torch.randn(2, 5).half(), torch.randn(0)]
    with NoFallback("cat"):
        got = torch.cat([p.openreg() for p in parts], 1)
    torch.testing.assert_close(got.cpu(), torch.cat(parts, 1))
    same_error(lambda a, b: torch.cat([a, b]), torch.randn(2, 3), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="same device|different"):
        torch.cat([torch.randn(2).openreg(), torch.randn(2)])


def load_models():
    """The benchmark's five model families (bench/models.py)."""
    import importlib.util
    path = __import__("pathlib").Path(__file__).resolve().parents[3] / "bench" / "models.py"
    spec = importlib.util.spec_from_file_location("bench_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = load_models()


@pytest.mark.parametrize("name", MODELS.MODELS)
def test_training_steps_match_cpu(name):
    """Three training steps of each benchmarked model: losses, gradients and parameters as on
    the CPU, with no operator falling back. (Adam moves a
    parameter by about lr wherever its gradient is only rounding noise, such as attention's key
    bias, whose exact gradient is zero: parameters are compared within one step of that.)"""
    cpu_step, cpu_model = MODELS.trainer(name, "cpu")
    dev_step, dev_model = MODELS.trainer(name, "openreg")
    adam = "Adam" in name
    for step in range(3):
        expected = cpu_step()
        with NoFallback():
            got = dev_step()
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
        # The first step starts from equal parameters; later ones from parameters a rounding
        # apart, where a max-pooling window's winner may change.
        tolerance = dict(rtol=1e-4, atol=1e-5) if step == 0 else dict(rtol=1e-2, atol=1e-3)
        for (n, p), q in zip(cpu_model.named_parameters(), dev_model.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, **tolerance, msg=f"{n}.grad")
    for (n, p), q in zip(cpu_model.named_parameters(), dev_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-3 if adam else 1e-5, msg=n)


def test_int64_addition_is_native_and_exact():
    """BatchNorm counts its steps in an int64 tensor: added on the device, exactly."""
    big = torch.tensor([1, 2**62, -5])
    for a, b, alpha in [(big, torch.tensor(1), 1), (big, big, -3), (torch.arange(6).view(3, 2).t(), torch.arange(3), 2)]:
        with NoFallback():
            got = torch.add(a.openreg(), b.openreg(), alpha=alpha)
        assert torch.equal(got.cpu(), torch.add(a, b, alpha=alpha))
    x = big.openreg()
    with NoFallback():
        x.add_(1)
    assert torch.equal(x.cpu(), big + 1)
