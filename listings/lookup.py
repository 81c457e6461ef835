"""How an operator reaches a backend, from the installed torch's own files: its structured
delegate, its meta class, its DispatchStub. `python listings/lookup.py sub.Tensor mm relu` (the
appendix "Starting your own backend" explains the answers)."""
import pathlib
import re
import sys

import torch
import torchgen

TORCH = pathlib.Path(torch.__file__).parent
YAML = pathlib.Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"


def lookup(op: str) -> None:
    """How the operator `op` ("name.overload", or "name" for the default overload) reaches a
    backend, from the installed torch's own files."""
    name, _, overload = op.partition(".")
    entry = re.search(rf"^- func: {re.escape(op)}\(.*?(?=^- func:)", YAML.read_text(), re.M | re.S)
    if entry is None:
        raise SystemExit(f"{op!r}: no such operator in native_functions.yaml (give name.overload, e.g. sub.Tensor)")
    delegate = re.search(r"structured_delegate: (\S+)", entry.group(0))
    print(f"{op}: structured_delegate:", delegate.group(1) if delegate else "none (not structured)")

    # The meta class is structured_<name>_<overload>; for the default overload, whose name is
    # empty, it is structured_<name>.
    meta_class = f"structured_{name}_{overload}" if overload else f"structured_{name}"
    meta = TORCH / f"include/ATen/ops/{name}_meta.h"
    found = meta.exists() and re.search(rf"struct TORCH_API {meta_class} : public ([\w:]+) {{\s*(void meta\(.*?\);)",
                                        meta.read_text(), re.S)
    print(f"  ATen/ops/{name}_meta.h:", f"{meta_class} : {found.group(1)}, {found.group(2)}" if found else "no meta class")

    stubs = [f"ATen/native/{h.name}: {line.strip()}" for h in sorted((TORCH / "include/ATen/native").glob("*.h"))
             for line in h.read_text().splitlines() if re.search(rf"DECLARE_DISPATCH\(\w+, {name}_stub\)", line)]
    print("  DispatchStub:", "; ".join(stubs) or f"no {name}_stub")


for op in sys.argv[1:] or ["sub.Tensor", "mm"]:
    lookup(op)
