"""The committed audit report reproduces: cells of reports/audit_digits.md regenerated here from
a clean folder with the report's own setting (its command's) equal the committed ones.
A record's identity includes the code that wrote it, so these runs cannot be reused from an
older code state."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import seq

from pall_avalanche.audit import run_audit
from pall_avalanche.audit.oracle import audit_rows
from pall_avalanche.audit.plans import DENSE, PALL_SUBNETWORKS, PER_TASK_MODELS
from pall_avalanche.audit.protocol import AUDIT_REQUESTS
from pall_avalanche.audit.verdict import family_p_values, verdict
from pall_avalanche.config import for_benchmark
from pall_avalanche.paper.audit import DEFAULT_SEEDS, POWERED

REPORT = Path(__file__).resolve().parents[2] / "reports" / "audit_digits.md"


def committed_row(label: str) -> dict[str, str]:
    lines = [line for line in REPORT.read_text().splitlines() if line.startswith("| ")]
    header, *rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return next(dict(zip(header, row, strict=True)) for row in rows if row[0] == label)


@pytest.mark.slow
def test_independent_cells_regenerate_from_a_clean_folder(tmp_path):
    text = REPORT.read_text()
    assert re.search(r"Command: `python benchmarks/audit\.py --permutations 10000 --jobs 2 "
                     r"--quiet --report-dir reports`", text), "the report's command changed"
    config = {**for_benchmark("digits"), **dict(POWERED)}
    runs = run_audit(["independent"], list(range(DEFAULT_SEEDS)), config, tmp_path,
                     requests=seq(" ".join(AUDIT_REQUESTS)), show_progress=False, jobs=2)
    row, = audit_rows(runs, ["independent"])
    committed = committed_row("Independent")
    assert committed["A_l"] == f"{row['A_l']:.2f} ± {row['A_l_std']:.2f}"
    assert committed["t not learned"].startswith(f"{row['not_learned']}/")
    assert committed["Eq. 1 AUC, t's head (instrument, raw p)"].startswith(
        f"{row['auc_head']:.3f} ")


def test_no_model_known_to_keep_part_of_t_would_be_reported_exact():
    """Held against the committed measurements: every positive control and leaky variant
    (each keeps a known part of what t trained) is re-judged as if it were registered exact,
    from its own committed row; none may read "exact within ε", and each one whose leak test
    rejects reads "exact: NOT supported"."""
    frame = pd.read_csv(REPORT.with_suffix(".csv"))
    known = {m for plan in (PALL_SUBNETWORKS, PER_TASK_MODELS, DENSE)
             for m in (plan.control, *plan.leaks)}
    rows = [r for r in frame.to_dict("records") if r["method"] in known]
    assert len(rows) == len(known)          # every kind's control and variants were audited
    for row in rows:
        adjusted = family_p_values([row])
        line = verdict(row, adjusted, exact=True, powered=bool(row["powered"]))
        assert "exact within ε = 0.05 (" not in line, (row["method"], line)
        if adjusted[(row["method"], "leak_auc")] < 0.05:
            assert "exact: NOT supported" in line, (row["method"], line)
