"""Copies the .rlib files named in `cargo build --message-format=json` (stdin) into the
directory given, so `mdbook test -L DIR` finds exactly one copy of each crate."""

import json
import shutil
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact":
        for name in message["filenames"]:
            if name.endswith(".rlib"):
                shutil.copy(name, sys.argv[1])
