"""The report command (python -m pall_avalanche.reports, pall-report): Table 1 side by side
and its refusal of mixed configurations."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from report_data import (
    M1,
    SIDE_BY_SIDE,
    SYMBOLS,
    cell,
    make_record,
    side_by_side_metrics,
    write_side_by_side,
)

from pall_avalanche import reports as report


def test_table1_side_by_side_cells_hand_computed(tmp_path):
    folders = write_side_by_side(tmp_path)
    markdown = report.main(["--table1", *map(str, folders), "--out", str(tmp_path / "t1")])
    assert markdown == (tmp_path / "t1.md").read_text()
    assert markdown.startswith("# Table 1 — cifar10, cifar100 side by side\n")
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header, *rows = [[c.strip().replace(r"\|", "|") for c in line.strip("|").split(" | ")]
                     for line in lines]
    assert r"| Independent | d × \|Ω_i\| |" in markdown       # "|" escaped in Markdown
    assert header == ["Method", "Model size",
                      *[f"{b} {c}" for b in SIDE_BY_SIDE
                        for c in ("A_l ↑", "A_u ↓", "F_l ↓", "F_u ↓")]]
    expected = []
    for method, alpha in [("sequential", None), ("wsn", None), ("pall", 0.05), ("pall", 0.1),
                          ("pall", 0.2), ("independent", None)]:
        label = {"sequential": "Sequential", "wsn": "WSN", "independent": "Independent",
                 "pall": f"PALL (α={alpha})"}[method]
        row = [label, SYMBOLS[method]]
        for methods, _ in SIDE_BY_SIDE.values():
            a_ls = [a_ls for a, a_ls in methods[method] if alpha in (None, a)]
            if not a_ls:
                row += ["—"] * 4
                continue
            metrics = [side_by_side_metrics(a_l, seed) for seed, a_l in enumerate(a_ls[0])]
            row += [cell([m[name] for m in metrics],
                          exact=name == "A_u" and method in ("pall", "independent"))
                    for name in ("A_l", "A_u", "F_l", "F_u")]
        expected.append(row)
    assert rows == expected
    assert rows[2][6:] == ["—"] * 4            # no PALL α=0.05 record on cifar100
    assert rows[4][2:4] == ["94.50 ± 2.12", "*Exact* (54.50 ± 2.12)"]     # 93, 96 by hand
    # The CSV: one row per benchmark and method, with the measured model size.
    csv = pd.read_csv(tmp_path / "t1.csv")
    assert list(zip(csv["benchmark"], csv["row"], csv["model_size_mb"], strict=True)) == [
        ("cifar10", "Sequential", 42.59), ("cifar100", "Sequential", 81.29),
        ("cifar10", "WSN", 49.24), ("cifar100", "WSN", 106.70),
        ("cifar10", "PALL (α=0.05)", 49.24),
        ("cifar10", "PALL (α=0.1)", 49.24), ("cifar100", "PALL (α=0.1)", 106.70),
        ("cifar10", "PALL (α=0.2)", 49.24), ("cifar100", "PALL (α=0.2)", 106.70),
        ("cifar10", "Independent", 212.95), ("cifar100", "Independent", 812.94)]
    assert csv["seeds"].tolist() == [2, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1]
    assert ("cifar10: d = 42.59, d + M_i = 49.24, d × |Ω_i| = 212.95; cifar100: d = 81.29, "
            "d + M_i = 106.70, d × |Ω_i| = 812.94") in markdown
    latex = (tmp_path / "t1.tex").read_text()
    assert r"PALL ($\alpha$=0.05) & $d + M_i$ & 91.00" in latex
    assert r"Independent & $d \times |\Omega_i|$ & 97.00" in latex


def test_table1_side_by_side_refuses_mixed_configurations(tmp_path):
    folders = write_side_by_side(tmp_path)
    other = make_record("sequential", 5, M1, benchmark="cifar10", requests=[], accuracy=[])
    other["config"] = {**other["config"], "benchmark": "cifar10", "alpha": 0.2, "epochs": 1}
    (folders[0] / "seed5.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"the sequential records of cifar10 come from 2 "
                                         r"configurations \(differing in \['epochs'\]\)"):
        report.main(["--table1", *map(str, folders), "--out", str(tmp_path / "t1")])
    assert not (tmp_path / "t1.md").exists()
