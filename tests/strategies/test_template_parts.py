"""The template's parts reach each other only through declared names: no part uses a private
name (``self._x``) that neither it nor Avalanche's templates define, and every member of
``TemplateParts`` is provided by the assembled template."""

from __future__ import annotations

import re
from pathlib import Path

import avalanche.training.templates as avalanche_templates

from pall_avalanche.strategies import UnlearningTemplate
from pall_avalanche.strategies.template import TemplateParts

TEMPLATE = Path(__file__).resolve().parents[2] / "pall_avalanche" / "strategies" / "template"


def defined_privates(text: str) -> set[str]:
    """The private names a source text defines: assigned on ``self``, methods, class
    attributes."""
    return (set(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=\n]*)?=", text))
            | set(re.findall(r"def (_[a-z]\w*)\(", text))
            | set(re.findall(r"^\s+(_[a-z]\w*)\s*[:=]", text, re.M)))


def test_no_part_uses_another_part_s_private_names():
    avalanche = set()
    for path in Path(avalanche_templates.__file__).parent.rglob("*.py"):
        avalanche |= defined_privates(path.read_text())
    assert {"_train_exp", "_before_training_exp", "_distributed_check"} <= avalanche
    foreign = {}
    for path in sorted(TEMPLATE.glob("*.py")):
        text = path.read_text()
        used = set(re.findall(r"self\.(_[a-z]\w*)", text))
        outside = used - defined_privates(text) - avalanche
        if outside:
            foreign[path.name] = sorted(outside)
    assert foreign == {}


def test_the_template_provides_every_declared_part():
    declared = [name for name in vars(TemplateParts)
                if not name.startswith("_") and callable(getattr(TemplateParts, name))]
    declared += list(TemplateParts.__annotations__)
    assert {"start_request", "end_request", "diverged", "record_statistics", "active_tasks",
            "request_log"} <= set(declared)
    methods = [n for n in declared if callable(getattr(TemplateParts, n, None))]
    assert [n for n in methods if not callable(getattr(UnlearningTemplate, n, None))] == []
    attributes = set(TemplateParts.__annotations__)
    lifecycle_and_base = "".join(p.read_text() for p in (TEMPLATE / "lifecycle.py",
                                                        TEMPLATE.parent / "base.py"))
    assert {a for a in attributes if f"self.{a} =" not in lifecycle_and_base
            and f"self.{a}:" not in lifecycle_and_base
            and not hasattr(UnlearningTemplate, a)} == set()
