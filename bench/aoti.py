"""AOTInductor benchmark: a packaged model's inference step on openreg, from Python
(`aoti_load_package`) and from C++ (openreg/cpp/examples/run_package.cpp, no Python), against
eager openreg and against an AOTInductor package of the same model compiled for the CPU, all
measured in one run.

`python bench/aoti.py` prints the table (`make bench` runs it).
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "openreg" / "cpp"))
import build_example  # noqa: E402

from compile import per_call  # noqa: E402  (bench/compile.py: median times per call, interleaved)


def mlp(width=256):
    return torch.nn.Sequential(torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.head = torch.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


# name, model, input shape (the first of the named cases is the issue's; the rest go wider)
CASES = [
    ("MLP 784-256-256-10, batch 64", mlp, (64, 784)),
    ("CNN 2 conv 32x32, batch 16", CNN, (16, 3, 32, 32)),
    ("MLP, batch 2", mlp, (2, 784)),
    ("MLP, batch 512", mlp, (512, 784)),
    ("MLP 784-2048-2048-10, batch 8", lambda: mlp(2048), (8, 784)),
    ("CNN, batch 3", CNN, (3, 3, 32, 32)),
]


def package(model, x, path):
    program = torch.export.export(model, (x,))
    return torch._inductor.aoti_compile_and_package(program, package_path=str(path))


def cpp_median_us(binary, path, inputs, directory, repeat):
    out = subprocess.run([str(binary), str(path), str(inputs), str(directory / "out.pt"), str(repeat)],
                         check=True, capture_output=True, text=True).stdout
    return float(next(l for l in out.splitlines() if l.startswith("median_us")).split()[1]) * 1e-6


def main():
    binary = build_example.build("run_package")
    sync = torch.openreg.synchronize
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for name, make, shape in CASES:
            torch.manual_seed(0)
            model = make().eval()
            x = torch.randn(shape)
            with torch.no_grad():
                cpu_path = package(model, x, directory / "cpu.pt2")
                device_model = model.to("openreg")
                xd = x.to("openreg")
                device_path = package(device_model, xd, directory / "openreg.pt2")
                cpu_runner = torch._inductor.aoti_load_package(cpu_path)
                device_runner = torch._inductor.aoti_load_package(device_path)
                once = per_call({"package": lambda: device_runner(xd)}, sync, 3, 1)["package"]
                calls = max(5, int(2e-2 / max(once, 1e-6)))
                measured = per_call({"eager": lambda: device_model(xd), "package": lambda: device_runner(xd)},
                                    sync, calls)
                eager, packaged = measured["eager"], measured["package"]
                cpu_packaged = per_call({"cpu": lambda: cpu_runner(x)}, lambda: None, calls)["cpu"]
            torch.save([x], directory / "inputs.pt")
            repeat = max(50, calls * 7)
            cpp = cpp_median_us(binary, device_path, directory / "inputs.pt", directory, repeat)
            cpu_cpp = cpp_median_us(binary, cpu_path, directory / "inputs.pt", directory, repeat)
            rows.append((name, eager, packaged, cpu_packaged, cpp, cpu_cpp))
            del cpu_runner, device_runner

    def us(seconds):
        return f"{seconds * 1e6:9.1f}"

    print(f"{'case':<31} {'eager':>9} {'package':>9} {'CPU pkg':>9} {'ratio':>6} {'C++':>9} "
          f"{'CPU C++':>9} {'ratio':>6}")
    print(f"{'':<31} {'openreg':>9} {'Python':>9} {'Python':>9} {'':>6} {'openreg':>9} {'':>9} {'':>6}")
    for name, eager, packaged, cpu_packaged, cpp, cpu_cpp in rows:
        print(f"{name:<31} {us(eager)} {us(packaged)} {us(cpu_packaged)} {packaged / cpu_packaged:5.2f}x "
              f"{us(cpp)} {us(cpu_cpp)} {cpp / cpu_cpp:5.2f}x")
    print("times: microseconds per inference step (median); ratio: openreg package / CPU package")
    print("targets: packaged MLP and CNN steps <= 1.10x the CPU package, from Python and from C++")


if __name__ == "__main__":
    main()
