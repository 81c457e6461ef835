"""The names torch's own Python code looks up on a device module (`torch.<device>`): found in
the installed torch's sources, as attribute accesses on the handles device-generic code keeps
for a device module (`device_handle`, `device_module`, `get_device_module(...)`,
`getattr(torch, device_type)`, ...), and as `getattr`/`hasattr` on them with a constant name.
Used by generate.py (src/generated/device-lookups.txt) and the test that torch.openreg has
each name."""

import collections
import re
from pathlib import Path

HANDLE = (r"(?:\b(?:self\.)?_?(?:custom_)?device_(?:handle|module|mod)\b"
          r"|\bcustom_backend\b"
          r"|\b(?:torch\._utils\.)?_get_device_module\([^()]*\)"
          r"|\b(?:torch\.)?get_device_module\([^()]*\)"
          r"|\bgetattr\(torch,\s*[\w.]*(?:device_type|backend_name|device\.type)[\w.]*\))")
ATTRIBUTE = re.compile(HANDLE + r"\.([A-Za-z_]\w*)")
BY_NAME = re.compile(r"\b(?:getattr|hasattr)\(\s*" + HANDLE + r"\s*,\s*[\"']([A-Za-z_]\w*)[\"']")
# getattr(handle, _seed_all_name) with `_seed_all_name = "manual_seed_all"` in the same file.
BY_VARIABLE = re.compile(r"\b(?:getattr|hasattr)\(\s*" + HANDLE + r"\s*,\s*([A-Za-z_]\w*)\s*[,)]")
CONSTANT = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*[\"']([A-Za-z_]\w*)[\"']\s*$", re.M)


def lookups(torch_root: Path) -> dict:
    """{name: sorted torch files (relative) that look it up}; torch's tests left out."""
    found = collections.defaultdict(set)
    for path in torch_root.rglob("*.py"):
        relative = path.relative_to(torch_root).as_posix()
        if relative.startswith("testing/"):
            continue
        text = path.read_text(errors="replace")
        for pattern in (ATTRIBUTE, BY_NAME):
            for match in pattern.finditer(text):
                found[match.group(1)].add(relative)
        constants = dict(CONSTANT.findall(text))
        for match in BY_VARIABLE.finditer(text):
            if match.group(1) in constants:
                found[constants[match.group(1)]].add(relative)
    return {name: sorted(files) for name, files in sorted(found.items())}


def table(found: dict) -> str:
    lines = [f"{'name on torch.<device>':28s} {'files':>5s}  first file that looks it up"]
    lines += [f"{name:28s} {len(files):5d}  {files[0]}" for name, files in found.items()]
    return "\n".join(lines) + "\n"
