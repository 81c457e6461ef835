# ANCHOR: tests
import os
import subprocess
import sys

CODE = "import sys, torch; print('torch_openreg' in sys.modules, torch.ones(1, device='openreg').device)"


def run(autoload):
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload}
    return subprocess.run([sys.executable, "-P", "-c", CODE], env=env, capture_output=True, text=True)


def test_import_torch_alone_loads_the_backend():
    out = run("1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "openreg:0"]


def test_autoload_can_be_switched_off():
    out = run("0")
    assert out.stdout == "" and "openreg" in out.stderr  # the device string is unknown
# ANCHOR_END: tests
