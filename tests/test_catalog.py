"""The catalog (pall_avalanche.catalog): every entry loads and agrees with its code, and a
class registered as an object declares its own size."""

from __future__ import annotations

from pall_avalanche.catalog import (
    BENCHMARK_INFO,
    INDEPENDENT_SIZE,
    METHOD_INFO,
    MODEL_INFO,
    SUBNETWORK_SIZE,
    load,
)

#: The field's strategies, whose sizes are their own (CLPU-DER++'s side networks, HAT's
#: embeddings, UnCLe's hypernetwork) or, for the Amnesiac learners, d.
FIELD_MODULES = {f"pall_avalanche.strategies.{name}" for name in ("clpu", "hat", "uncle",
                                                                  "amnesiac")}


def test_every_catalog_entry_loads_and_agrees_with_its_code():
    from pall_avalanche.options import SELECTION_NAMES
    from pall_avalanche.rehearsal import SELECTIONS
    from pall_avalanche.strategies import Independent, SubnetworkStrategy, UnlearningTemplate

    for name, info in METHOD_INFO.items():
        strategy = load(info.strategy)
        assert isinstance(strategy, type) and issubclass(strategy, UnlearningTemplate), name
        # Table 1's size symbol, declared by the catalog, against the class hierarchy
        size = (INDEPENDENT_SIZE if issubclass(strategy, Independent) else
                SUBNETWORK_SIZE if issubclass(strategy, SubnetworkStrategy) else
                strategy.table_size if strategy.__module__ in FIELD_MODULES else "d")
        assert info.size == size == strategy.table_size, name
    for info in (*BENCHMARK_INFO.values(), *MODEL_INFO.values()):
        assert callable(load(getattr(info, "builder", None) or info.constructor)), info.name
    assert list(SELECTIONS) == list(SELECTION_NAMES)


def test_a_strategy_class_registered_as_an_object_gets_its_size_from_its_class():
    from pall_avalanche.catalog import Method, register_method
    from pall_avalanche.strategies import Independent, SubnetworkStrategy

    class OwnSubnetwork(SubnetworkStrategy):
        pass

    class OwnIndependent(Independent):
        pass

    try:
        sizes = [register_method(Method(f"_size_probe_{i}", cls, exact=False)).size
                 for i, cls in enumerate((OwnSubnetwork, OwnIndependent))]
    finally:
        for i in range(2):
            METHOD_INFO.pop(f"_size_probe_{i}", None)
    assert sizes == [SUBNETWORK_SIZE, INDEPENDENT_SIZE]
