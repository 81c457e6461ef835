"""A piece of code has one home in the book: other chapters link to it."""

import collections
import re

from conftest import ROOT


def test_no_listing_is_included_twice():
    seen = collections.defaultdict(list)
    for chapter in sorted((ROOT / "src").glob("*.md")):
        for include in re.findall(r"\{\{#include ([^}]+)\}\}", chapter.read_text()):
            seen[include.strip()].append(chapter.name)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}
