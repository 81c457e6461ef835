"""The real-model zoos of openreg/python/tests/test_zoo.py and test_zoo_families.py
(torchvision, timm and transformers, small configs, random weights), timed on the CPU and on
openreg in one process: a training step (SGD) for every model, and greedy generation with
the KV cache for the decoders, as time per step, tokens per second and the ratio to CPU (for
tokens per second, CPU's rate over ours, so that above 1 is slower everywhere). Then the
first zoo's steps at other batch sizes. The ratio is the median of the rounds' ratios; the
spread is their lowest and highest. A round times a block of calls on each device (see
`paired`).

`python bench/zoo.py` prints the tables.
"""

import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "openreg/python/tests"))
from test_zoo import LANGUAGE, VISION, batch_for  # noqa: E402  (the models the tests check)
from test_zoo_families import FAMILIES, build, move  # noqa: E402


TOKENS = 32  # generated per call


def sync(device):
    if device == "openreg":
        torch.openreg.synchronize()


def paired(runs, rounds, block=0.1):
    """Each of `runs` ({device: function}) timed in alternation: a round times a block of calls
    of each, a slow spell of the shared machine then lands on both sides of a ratio. A block
    is as many calls as take `block` seconds on the slower device, synchronized once at its
    end, as torch.utils.benchmark.Timer synchronizes an accelerator at each read of its clock:
    a device's time is its calls' throughput, not one call plus draining its queue. Returns the
    median seconds per call of each device and the rounds' ratios (second device over first)."""
    slowest = 0.0
    for device, run in runs.items():
        for _ in range(2):  # warm-up: first-call costs (allocations, lazy initialisation)
            run()
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
        slowest = max(slowest, time.perf_counter() - start)
    calls = max(1, round(block / slowest))
    times = {device: [] for device in runs}
    for _ in range(rounds):
        for device, run in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            sync(device)
            times[device].append((time.perf_counter() - start) / calls)
    first, second = times.values()
    return [statistics.median(times[device]) for device in runs], [b / a for a, b in zip(first, second)]


def row(label, cpu, dev, ratios, unit="ms"):
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    if unit == "ms":
        return f"{label:<44}{cpu * 1e3:>8.2f}ms{dev * 1e3:>8.2f}ms{statistics.median(ratios):>7.2f}x{spread:>12}"
    return f"{label:<44}{TOKENS / cpu:>6.0f}tok/s{TOKENS / dev:>6.0f}tok/s{statistics.median(ratios):>7.2f}x{spread:>12}"


def zoo_loss(model, batch):
    if "pixels" in batch:
        return torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["labels"])
    return model(**batch).loss


def training_step(model, batch, device, loss=zoo_loss):
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = move(batch, device)

    def step():
        optimizer.zero_grad()
        loss(model, batch).backward()
        optimizer.step()

    return step


def resized(name, batch, size):
    """The zoo's batch for `name` with `size` samples."""
    g = torch.Generator().manual_seed(1)
    if name in VISION:
        return {"pixels": torch.randn(size, 3, 64, 64, generator=g), "labels": torch.randint(0, 10, (size,), generator=g)}
    ids = torch.randint(2, 128, (size, 12), generator=g)
    return {"input_ids": ids, "labels": ids}


def generation(model, device, tokens=TOKENS):
    model = model.to(device).eval()
    prompt = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(2)).to(device)

    def generate():
        model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, use_cache=True)

    return generate


def quiet(make):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def main():
    print(f"{'case':<44}{'CPU':>10}{'openreg':>10}{'ratio':>8}{'spread':>12}")
    steps = {name: (VISION.get(name) or LANGUAGE[name], batch_for(name), zoo_loss) for name in [*VISION, *LANGUAGE]}
    for name, family in FAMILIES.items():
        steps[name] = (lambda name=name: build(name), family.batch(torch.Generator().manual_seed(1)), family.loss)
    for name, (make, batch, loss) in steps.items():
        model = quiet(make)
        (cpu, dev), ratios = paired({device: training_step(copy.deepcopy(model), batch, device, loss)
                                     for device in ("cpu", "openreg")}, rounds=7)
        print(row(name + " training step", cpu, dev, ratios))
    decoders = {"gpt2": LANGUAGE["gpt2"], "llama": LANGUAGE["llama"], "t5": LANGUAGE["t5"]}
    decoders.update({name: (lambda name=name: build(name)) for name, f in FAMILIES.items() if f.infer == "generate"})
    for name, make in decoders.items():
        model = quiet(make)
        (cpu, dev), ratios = paired({device: generation(copy.deepcopy(model), device) for device in ("cpu", "openreg")},
                                    rounds=9)
        print(row(name + " greedy generation", cpu, dev, ratios, unit="tok"))
    print()
    print("Other batch sizes (the first zoo's vision models at 64x64, language models at 12 tokens):")
    for name in ["resnet10t", "vit_tiny", "gpt2", "llama"]:
        for size in (1, 8, 32):
            model = quiet(VISION.get(name) or LANGUAGE[name])
            batch = resized(name, batch_for(name), size)
            (cpu, dev), ratios = paired({device: training_step(copy.deepcopy(model), batch, device)
                                         for device in ("cpu", "openreg")}, rounds=5)
            print(row(f"{name} training step, batch {size}", cpu, dev, ratios))


if __name__ == "__main__":
    import transformers

    transformers.logging.set_verbosity_error()
    main()
