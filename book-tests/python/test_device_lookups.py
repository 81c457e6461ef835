"""Every name torch's Python code looks up on torch.<device> (src/generated/device-lookups.txt,
from the installed sources) is on torch.openreg, or the Frontend chapter's table says why not."""

import re

import torch

from conftest import ROOT


def test_torch_openreg_has_every_name_torch_looks_up_or_the_chapter_says_why():
    lines = (ROOT / "src/generated/device-lookups.txt").read_text().splitlines()[1:]
    looked_up = {line.split()[0] for line in lines if line.strip()}
    chapter = (ROOT / "src/frontend.md").read_text()
    table = chapter.split("<!-- ANCHOR: not_provided -->", 1)[1].split("<!-- ANCHOR_END: not_provided -->", 1)[0]
    explained = {name for row in table.splitlines() if row.startswith("| `")
                 for name in re.findall(r"`(\w+)`", row.split(" | ")[0])}
    missing = {name for name in looked_up if not hasattr(torch.openreg, name)}
    assert missing - explained == set(), "torch looks these up on torch.openreg, which lacks them"
    assert explained - missing == set(), "the chapter explains names torch.openreg has, or torch no longer looks up"
    assert len(looked_up) > 30
