"""Copies the libraries named in `cargo build --message-format=json` (stdin) into the
directory given — each crate's .rlib, and the shared library of each procedural macro a
dependency uses — so `mdbook test -L DIR` finds exactly one copy of each crate."""

import json
import shutil
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact":
        proc_macro = "proc-macro" in message["target"]["kind"]
        for name in message["filenames"]:
            if name.endswith(".rlib") or (proc_macro and name.endswith(".so")):
                shutil.copy(name, sys.argv[1])
