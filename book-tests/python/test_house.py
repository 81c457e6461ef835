"""The source tree's shape, which the chapters rely on when they point a reader at a file:
each kernel family's launcher lives beside its kernel, and the module that lists them holds
only what every launcher shares. (The runtime's layers are checked by
openreg/runtime/tests/layers.rs, where cargo reads them.)"""

import re

from conftest import ROOT

KERNELS = ROOT / "openreg" / "torch" / "src" / "operators"
# What every launcher shares: the launch on the current stream, the checked address
# translation, the error for an unsupported dtype, and a dtype test on operands.
SHARED = {"launch", "view", "dense", "unsupported", "dtype_is"}


def functions(path):
    return re.findall(r"^\s*(?:pub(?:\([\w:]+\))? )?(?:unsafe )?fn (\w+)", path.read_text(), re.M)


def test_kernels_rs_holds_no_launcher():
    extra = sorted(set(functions(KERNELS / "kernels.rs")) - SHARED)
    assert not extra, f"kernels.rs defines {extra}: a launcher belongs in its family's file under kernels/"


def test_every_launcher_the_bridge_calls_is_in_a_family_file():
    bridge = (ROOT / "openreg" / "torch" / "src" / "ffi.rs").read_text()
    imported = re.findall(r"^use crate::operators::kernels::(\w+)::(?:\{([^}]*)\}|(\w+));", bridge, re.M)
    assert imported, "ffi.rs imports no launcher: has the bridge moved?"
    for family, group, single in imported:
        names = [n.strip() for n in (group or single).split(",") if n.strip()]
        defined = functions(KERNELS / "kernels" / f"{family}.rs")
        for name in names:
            assert name in defined, f"{name} is not defined in kernels/{family}.rs"


def test_the_thread_pool_is_not_confused_with_pooling():
    files = {p.name for p in (KERNELS / "kernels").glob("*.rs")}
    assert "thread_pool.rs" in files and "pooling.rs" in files and "pool.rs" not in files
