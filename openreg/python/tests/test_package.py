"""Autoload through the torch.backends entry point, the version check, illegal accesses.
Each runs in a fresh interpreter."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
import torch_openreg


def run(code, **env):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_import_torch_alone_enables_the_device():
    out = run("""
        import sys, torch
        x = torch.randn(3, device="openreg")
        print(x.device, "torch_openreg" in sys.modules, torch.openreg.device_count())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["openreg:0", "True", "2"]


def test_autoload_can_be_disabled():
    out = run("""
        import sys, torch
        print("torch_openreg" in sys.modules)
        torch.empty(1, device="openreg")
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.stdout.strip() == "False"
    assert out.returncode != 0 and "openreg" in out.stderr


def test_version_pins_agree():
    assert torch_openreg._C._torch_version == torch_openreg.TORCH_VERSION
    assert torch.__version__.split("+")[0] == torch_openreg.TORCH_VERSION
    pyproject = Path(torch_openreg.__file__).parents[1] / "pyproject.toml"
    assert f'"torch=={torch_openreg.TORCH_VERSION}"' in pyproject.read_text()


def test_version_mismatch_is_a_clear_import_error():
    out = run("""
        import torch
        torch.__version__ = "2.99.0"
        import torch_openreg
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert "ImportError: torch_openreg needs torch==2.15.0, but torch 2.99.0 is installed" in out.stderr


def test_host_access_to_device_memory_says_what_happened():
    out = run("""
        import ctypes, torch
        x = torch.ones(1024, device="openreg:1")
        ctypes.string_at(x.data_ptr() + 8, 4)
    """)
    assert out.returncode == -11, out.stderr  # SIGSEGV, after the explanation
    assert "openreg: illegal memory access: host code touched device memory" in out.stderr
    assert "on openreg:1, inside the allocation at 0x" in out.stderr
    assert re.search(r"\(\d+ bytes\)", out.stderr) and "tensor.cpu()" in out.stderr


def test_fork_after_initialisation_is_refused_and_spawn_works(tmp_path):
    script = tmp_path / "fork_and_spawn.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import os
        import torch

        def on_device(n):
            return torch.arange(n, device="openreg:1").sum().item()

        if __name__ == "__main__":
            torch.ones(1, device="openreg")  # initialises the runtime
            pid = os.fork()
            if pid == 0:
                try:
                    torch.ones(1, device="openreg")
                    os._exit(3)
                except RuntimeError as e:
                    print("child:", e, flush=True)
                    os._exit(0 if torch.openreg._is_in_bad_fork() else 4)
            _, status = os.waitpid(pid, 0)
            print("child exit:", os.waitstatus_to_exitcode(status))
            print("parent in bad fork:", torch.openreg._is_in_bad_fork())
            with mp.get_context("spawn").Pool(1) as pool:
                print("spawned:", pool.map(on_device, [5]))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "child: Cannot re-initialize OpenReg in forked subprocess. To use OpenReg with multiprocessing, "
        "you must use the 'spawn' start method (the device was used in the parent before fork())",
        "child exit: 0",
        "parent in bad fork: False",
        "spawned: [10]",
    ]
