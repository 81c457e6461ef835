"""Compiles examples/run_package.cpp against the installed torch and libtorch_openreg.so.

The binary is cached under target/cpp-examples/, keyed by the source, the header and the
flags: tests, benchmarks and the book share one build. Prints the binary's path when run.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LIBRARY = ROOT / "target" / "release" / "libtorch_openreg.so"


def command(source: Path, binary: Path) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    torch_lib = Path(torch.__file__).parent / "lib"
    includes = [f"-I{d}" for d in cpp_extension.include_paths()] + [f"-I{HERE / 'include'}"]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        os.environ.get("CXX", "c++").split()[-1], "-std=c++20", "-O2", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *includes, str(source), "-o", str(binary),
        f"-L{LIBRARY.parent}", "-ltorch_openreg", f"-L{torch_lib}", "-ltorch", "-ltorch_cpu", "-lc10",
        f"-Wl,-rpath,{LIBRARY.parent}", f"-Wl,-rpath,{torch_lib}",
    ]


def build(name: str = "run_package") -> Path:
    """The compiled example `name`, built if its inputs changed."""
    if not LIBRARY.exists():
        raise FileNotFoundError(f"{LIBRARY} is missing: run `make build` (cargo build --release -p openreg-cpp)")
    source = HERE / "examples" / f"{name}.cpp"
    key = hashlib.sha256()
    for part in (source.read_bytes(), (HERE / "include" / "torch_openreg.h").read_bytes(),
                 " ".join(command(source, Path("x"))).encode()):
        key.update(part)
    binary = ROOT / "target" / "cpp-examples" / key.hexdigest()[:16] / name
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        subprocess.run(command(source, partial), check=True)
        partial.rename(binary)
    return binary


if __name__ == "__main__":
    print(build(*sys.argv[1:]))
