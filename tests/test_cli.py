"""The command-line kit (pall_avalanche.cli): method groups."""

from __future__ import annotations

import pytest

from pall_avalanche.cli import parse_methods


def test_method_groups_expand_in_order_without_repeats():
    assert parse_methods("all") == ["sequential", "ewc", "lwf", "lsf", "gem", "er", "derpp",
                                    "packnet", "wsn", "pall", "independent"]
    assert parse_methods("pall,ablations,pall") == ["pall", "er_retrain", "static_sparse",
                                                    "dynamic_sparse"]
    with pytest.raises(ValueError, match=r"or the groups all, ablations"):
        parse_methods(" , ")
