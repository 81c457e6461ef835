"""The real-model zoo of openreg/python/tests/test_zoo.py (timm and transformers, small
configs, random weights), timed on the CPU and on openreg in one process: a training step
(SGD) for every model, and greedy generation with the KV cache for the decoders, as time per
step, tokens per second and the ratio to CPU (for tokens per second, CPU's rate over ours,
so that above 1 is slower everywhere).

`python bench/zoo.py` prints the table.
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


TOKENS = 32  # generated per call


def sync(device):
    if device == "openreg":
        torch.openreg.synchronize()


def paired(runs, rounds):
    """Median seconds of each of `runs` ({device: function}), timed in alternation, one call of
    each per round: a slow spell of the shared machine then lands on both sides of a ratio."""
    for device, run in runs.items():
        run()  # warm-up: first-call costs (allocations, lazy initialisation) are not the steady state
        sync(device)
    times = {device: [] for device in runs}
    for _ in range(rounds):
        for device, run in runs.items():
            start = time.perf_counter()
            run()
            sync(device)
            times[device].append(time.perf_counter() - start)
    return [statistics.median(times[device]) for device in runs]


def training_step(model, batch, device):
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = {k: v.to(device) for k, v in batch.items()}

    def step():
        optimizer.zero_grad()
        if "pixels" in batch:
            loss = torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["labels"])
        else:
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()

    return step


def generation(model, device, tokens=TOKENS):
    model = model.to(device).eval()
    prompt = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(2)).to(device)

    def generate():
        model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, use_cache=True)

    return generate


def main():
    print(f"{'case':<40}{'CPU':>10}{'openreg':>10}{'ratio':>8}")
    for name, make in {**VISION, **LANGUAGE}.items():
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make()
        batch = batch_for(name)
        cpu, dev = paired({device: training_step(copy.deepcopy(model), batch, device)
                           for device in ("cpu", "openreg")}, rounds=7)
        print(f"{name + ' training step':<40}{cpu * 1e3:>8.2f}ms{dev * 1e3:>8.2f}ms{dev / cpu:>7.2f}x")
    for name in ["gpt2", "llama", "t5"]:
        torch.manual_seed(0)
        model = LANGUAGE[name]()
        cpu, dev = paired({device: generation(copy.deepcopy(model), device) for device in ("cpu", "openreg")},
                          rounds=9)
        print(f"{name + ' greedy generation':<40}{TOKENS / cpu:>6.0f}tok/s{TOKENS / dev:>6.0f}tok/s{dev / cpu:>7.2f}x")


if __name__ == "__main__":
    import transformers

    transformers.logging.set_verbosity_error()
    main()
