"""One training step of five model families, on the CPU and on openreg in one process: the
time of a step, the ratio, and the operators that reached the CPU fallback during it (the
target is none). The same cases run a second time with OPENREG_NATIVE_KERNELS=0, where the
operators with CPU kernels go through the fallback.

`python bench/models.py` prints the table; `--svg FILE` also draws it; `--json` prints raw
numbers for one process. openreg/python/tests/test_models.py trains each model for three steps
on both devices and compares losses and parameters.
"""

import copy
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ANCHOR: models
class LSTMLanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 32)
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 100)

    def forward(self, tokens):
        return self.head(self.lstm(self.embedding(tokens))[0])


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 64, batch_first=True)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


def build(name):
    """(model, optimizer factory, inputs, targets, loss) of one model family, on the CPU."""
    torch.manual_seed(0)
    if name == "MLP (GELU, LayerNorm, AdamW)":
        model = nn.Sequential(nn.Linear(784, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 256),
                              nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 10))
        return model, lambda p: torch.optim.AdamW(p, lr=1e-3), torch.randn(64, 784), torch.randint(0, 10, (64,)), F.cross_entropy
    if name == "CNN (conv-bn-relu-pool, SGD momentum)":
        block = lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]  # noqa: E731
        model = nn.Sequential(*block(3, 16), *block(16, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
        return model, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)), F.cross_entropy
    if name == "LSTM language model (Adam)":
        lm_loss = lambda out, y: F.cross_entropy(out.reshape(-1, 100), y.reshape(-1))  # noqa: E731
        return LSTMLanguageModel(), lambda p: torch.optim.Adam(p, lr=1e-3), torch.randint(0, 100, (8, 20)), torch.randint(0, 100, (8, 20)), lm_loss
    if name == "GRU classifier (Adam)":
        return GRUClassifier(), lambda p: torch.optim.Adam(p, lr=1e-3), torch.randn(8, 20, 16), torch.randint(0, 5, (8,)), F.cross_entropy
    if name == "Transformer encoder (AdamW)":
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Flatten(), nn.Linear(16 * 64, 10))
        return model, lambda p: torch.optim.AdamW(p, lr=1e-3), torch.randn(8, 16, 64), torch.randint(0, 10, (8,)), F.cross_entropy
    raise ValueError(name)


MODELS = ["MLP (GELU, LayerNorm, AdamW)", "CNN (conv-bn-relu-pool, SGD momentum)", "LSTM language model (Adam)",
          "GRU classifier (Adam)", "Transformer encoder (AdamW)"]
# ANCHOR_END: models


# ANCHOR: step
def trainer(name, device):
    """A function running one training step of `name` on `device` and returning the loss (a
    tensor: the caller decides when to wait for it), and the model."""
    model, optimizer, x, y, loss_fn = build(name)
    model = copy.deepcopy(model).to(device)
    opt = optimizer(model.parameters())
    x, y = x.to(device), y.to(device)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, model
# ANCHOR_END: step


def per_step(steps, rounds=5, warmup=0.05, repeats=5):
    """The median time of a step per device. The devices take turns, a block of steps each, so
    that a slow spell of this shared machine falls on both; each block starts with `warmup`
    seconds of untimed steps: the other device's threads are still winding down (the CPU's
    OpenMP worker spins for 10-20 ms after its last parallel region, holding one of the two
    cores)."""
    times = {device: [] for device in steps}
    for _ in range(rounds):
        for device, step in steps.items():
            sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
            start = time.perf_counter()
            while time.perf_counter() - start < warmup:
                step()
                sync()
            for _ in range(repeats):
                start = time.perf_counter()
                step()
                sync()
                times[device].append(time.perf_counter() - start)
    return {device: statistics.median(t) for device, t in times.items()}


def fallbacks(step):
    """The operators that reached the CPU fallback during one step (after warm-up)."""
    step()
    torch.openreg.synchronize()
    torch.openreg.reset_fallback_counts()
    step()
    torch.openreg.synchronize()
    return torch.openreg.fallback_counts()


def measure():
    out = {}
    for name in MODELS:
        steps = {"cpu": trainer(name, "cpu")[0], "openreg": trainer(name, "openreg")[0]}
        out[name] = {**per_step(steps), "fallback": fallbacks(steps["openreg"])}
    return out


def svg(rows):
    """Bars of openreg/CPU step-time ratios, native and with the fallback."""
    width, left, bar, gap = 720, 290, 11, 10
    scale = lambda r: min(r, 4.0) / 4.0 * (width - left - 60)  # noqa: E731
    height = 40 + len(rows) * (2 * bar + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" font-family="sans-serif" '
           f'font-size="12" role="img" aria-label="openreg training step time as a multiple of CPU">',
           f'<text x="{left}" y="16" font-weight="bold">time per training step, multiple of CPU (1.0 = CPU)</text>']
    y = 30
    for name, native, fallback in rows:
        out.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end">{name}</text>')
        for value, colour, label in [(native, "#2f7d4f", "native"), (fallback, "#b5532a", "fallback")]:
            w = max(scale(value), 1)
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}">'
                       f'<title>{name}, {label}: {value:.2f}x</title></rect>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar - 1}">{value:.2f}x</text>')
            y += bar
        y += gap
    one = left + scale(1.0)
    out.append(f'<line x1="{one:.1f}" y1="26" x2="{one:.1f}" y2="{y}" stroke="#333" stroke-dasharray="4 3"/>')
    out.append(f'<rect x="{left}" y="{y + 8}" width="10" height="10" fill="#2f7d4f"/>'
               f'<text x="{left + 14}" y="{y + 17}">Rust kernels</text>'
               f'<rect x="{left + 110}" y="{y + 8}" width="10" height="10" fill="#b5532a"/>'
               f'<text x="{left + 124}" y="{y + 17}">OPENREG_NATIVE_KERNELS=0 (bars stop at 4x)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


TARGET = 1.1


def main():
    if "--json" in sys.argv:
        print(json.dumps(measure()))
        return
    run = lambda env: json.loads(subprocess.run(  # noqa: E731
        [sys.executable, __file__, "--json"], env={**os.environ, **env}, check=True,
        capture_output=True, text=True).stdout)
    native, fallback = run({}), run({"OPENREG_NATIVE_KERNELS": "0"})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; one training step, "
          "ratio = openreg / CPU in the same process")
    print(f"{'model':<40} {'CPU':>8} {'openreg':>8} {'ratio':>6} {'target':>7} {'fallback':>9} {'ratio':>6}")
    rows = []
    for name, r in native.items():
        f = fallback[name]
        print(f"{name:<40} {r['cpu'] * 1e3:>6.2f}ms {r['openreg'] * 1e3:>6.2f}ms {r['openreg'] / r['cpu']:>5.2f}x "
              f"{TARGET:>6.1f}x {f['openreg'] * 1e3:>7.2f}ms {f['openreg'] / f['cpu']:>5.2f}x")
        rows.append((name, r["openreg"] / r["cpu"], f["openreg"] / f["cpu"]))
    print("\nOperators that reached the CPU fallback in one step (native kernels on):")
    for name, r in native.items():
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r["fallback"].items())) or "none"
        print(f"  {name}: {ops}")
    if "--svg" in sys.argv:
        with open(sys.argv[sys.argv.index("--svg") + 1], "w") as f:
            f.write(svg(rows))


if __name__ == "__main__":
    main()
