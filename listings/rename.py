#!/usr/bin/env python3
"""Renames a copied chapter crate from OpenReg to your backend, in place.

    cp -r listings/operators ~/mydev && python3 listings/rename.py ~/mydev mydev

Every name in the crate's README table changes, the pairs that must agree together:
the Python package, the device name, the Cargo package and the generated header it names,
the cxx bridge namespace and the C++ namespace, the operator namespace, the C++ and
environment-variable names. Names change, nothing else: the README (prose about where the
crate comes from) stays as the book wrote it, and paths into the book's repository
(`openreg/runtime`, `openreg/torch`, `openreg/python`) keep pointing there. Run it once, on
a copy.
"""

import argparse
import re
import sys
from pathlib import Path

# Device types PyTorch already has: a backend may not take one of their names.
TAKEN = {"cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
         "vulkan", "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia",
         "privateuseone", "openreg", "sparse", "quantized", "torch"}
SKIP = {"target", ".venv", "__pycache__", ".git"}
# Code and configuration: where the names are. Markdown is prose about the book's crate.
TEXT = {".rs", ".cpp", ".h", ".py", ".toml", ".txt", ".yaml", ".cfg"}
# Paths into the book's repository, which a comment may cite: they name a place, not the backend.
REPOSITORY_PATH = re.compile(r"((?<![\w./-])openreg/(?:torch|runtime|python)\b[\w./-]*)")


def replacements(name: str, display: str):
    """(old, new) in the order they apply: longer names before the bare device name."""
    return [
        ("torch_openreg", f"torch_{name}"),   # Python package, module-name, imports
        ("torch-openreg", f"torch-{name}"),   # Cargo package and the header path cxx derives from it
        ("OPENREG", name.upper()),            # environment variables
        ("OpenReg", display),                 # C++ classes, kOpenReg, messages
        ("openreg", name),                    # device, namespaces, torch.openreg, openreg_glue
    ]


def rename_text(text: str, name: str, display: str) -> str:
    """The names in `text` renamed; paths into the book's repository left as they are."""
    parts = REPOSITORY_PATH.split(text)  # the paths at odd positions
    for i in range(0, len(parts), 2):
        for old, repl in replacements(name, display):
            parts[i] = parts[i].replace(old, repl)
    return "".join(parts)


def rename(crate: Path, name: str, display: str) -> list:
    if not (crate / "Cargo.toml").is_file() or not (crate / "torch_openreg").is_dir():
        raise SystemExit(f"{crate}: not an unrenamed chapter crate (no Cargo.toml and torch_openreg/)")
    changed = []
    for path in sorted(crate.rglob("*")):
        if any(part in SKIP for part in path.relative_to(crate).parts) or not path.is_file():
            continue
        if path.suffix not in TEXT and path.name != "Makefile":
            continue
        text = path.read_text()
        new = rename_text(text, name, display)
        if new != text:
            path.write_text(new)
            changed.append(path.relative_to(crate))
    # Files named after the backend.
    package = crate / f"torch_{name}"
    (crate / "torch_openreg").rename(package)
    if (package / "openreg.py").exists():
        (package / "openreg.py").rename(package / f"{name}.py")
    (crate / "csrc" / "OpenReg.h").rename(crate / "csrc" / f"{display}.h")
    if (crate / "openreg_triton").is_dir():  # the Triton backend plugin (listings/compile)
        (crate / "openreg_triton").rename(crate / f"{name}_triton")
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crate", type=Path, help="the copied crate's directory")
    parser.add_argument("name", help="the device name users will type, e.g. mydev")
    parser.add_argument("--display", help="the name in C++ classes and messages (default: Name)")
    args = parser.parse_args(argv)

    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.name) or args.name in TAKEN:
        parser.error(f"invalid device name {args.name!r}: expected a lowercase identifier "
                     f"that PyTorch does not already use ({', '.join(sorted(TAKEN))})")
    display = args.display or args.name[0].upper() + args.name[1:]
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", display):
        parser.error(f"invalid --display {display!r}: expected a C++ identifier starting with a capital")

    changed = rename(args.crate, args.name, display)
    print(f"renamed openreg to {args.name} ({display}) in {len(changed)} files of {args.crate}; "
          "README.md is left as the book wrote it")
    try:
        from importlib.metadata import distribution
        distribution("torch_openreg")
        print("warning: torch_openreg is installed in this Python; uninstall it "
              "(pip uninstall torch_openreg) before you install the renamed crate: two "
              "backends both register PrivateUse1 and `import torch` fails", file=sys.stderr)
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
