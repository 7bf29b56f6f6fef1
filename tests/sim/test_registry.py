"""Every emulator name in the ISA table is accounted for by the emulator."""

from jaxptx import isa
from jaxptx.sim.core.machine import MACHINE, NO_OPS
from jaxptx.sim.semantics import SEMANTICS, UNSUPPORTED
from jaxptx.sim.semantics.registry import register


def test_every_table_sim_name_is_registered_or_refused_with_a_reason():
    known = SEMANTICS.keys() | MACHINE | NO_OPS | UNSUPPORTED.keys()
    missing = sorted({f"{i.sim} ({i.opcode})" for i in isa.INSTRUCTIONS if i.sim is not None and i.sim not in known})
    assert not missing, f"table sim names with no emulator semantics: {missing}"


def test_the_four_sets_are_disjoint():
    sets = [set(SEMANTICS), set(MACHINE), set(NO_OPS), set(UNSUPPORTED)]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            assert not a & b


def test_unsupported_names_have_reasons():
    assert all(isinstance(r, str) and len(r) > 10 for r in UNSUPPORTED.values())


def test_registered_names_are_table_names():
    table = {i.sim for i in isa.INSTRUCTIONS}
    assert not sorted(set(SEMANTICS) - table)


def test_a_name_registered_twice_is_refused():
    import pytest
    with pytest.raises(ValueError, match="registered twice"):
        register("add", lambda s: None)
