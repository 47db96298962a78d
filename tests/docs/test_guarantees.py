"""The guarantees page names, for every promise, the tests that hold it: each named test file
exists, and each named test is defined in it."""

from __future__ import annotations

import re

from blocks import DOCS, ROOT


def test_every_test_the_guarantees_page_names_exists():
    page = (DOCS / "reference" / "guarantees.md").read_text()
    promises = re.findall(r"^- \*\*(.+?)\*\*(.*?)(?=^- \*\*|^## |^Not promised|\Z)", page,
                          re.M | re.S)
    assert len(promises) >= 15
    for title, body in promises:
        named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", body)
        assert named, f"no test named for {title!r}"
        for path, test in named:
            assert (ROOT / path).is_file(), path
            if test:
                assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.M), \
                    f"{path}::{test}"
