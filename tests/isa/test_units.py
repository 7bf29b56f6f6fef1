"""``isa.UNITS``: what each emulator operation is for the profiler and the
sanitizer. Every operation of the table is listed there or is arithmetic
(its class follows its type), so a new operation cannot be profiled or
checked as something it is not."""

from __future__ import annotations

import re

from jaxptx.isa import INSTRUCTIONS, UNITS
from jaxptx.isa._units import MIX_CLASSES

# PTX ISA chapters of arithmetic, logic, comparison and video instructions
# (integer, extended-precision, floating-point, half precision, comparison,
# half comparison, logic and shift, video): classed by type.
_TYPED_CHAPTERS = ("9.7.1 ", "9.7.1.", "9.7.2 ", "9.7.3 ", "9.7.4 ", "9.7.6 ", "9.7.7 ", "9.7.8 ", "9.7.18")
_TYPED_MOVES = {"prmt"}     # a byte permute: integer work


def test_every_operation_is_listed_or_typed_arithmetic() -> None:
    unlisted = {}
    for inst in INSTRUCTIONS:
        if inst.sim is None or inst.sim in UNITS or inst.sim in _TYPED_MOVES:
            continue
        if not inst.section.startswith(_TYPED_CHAPTERS):
            unlisted[inst.sim] = inst.section
    assert not unlisted, f"operations neither in isa.UNITS nor arithmetic: {unlisted}"


def test_units_name_real_operations_and_classes() -> None:
    sims = {inst.sim for inst in INSTRUCTIONS}
    assert set(UNITS) <= sims, sorted(set(UNITS) - sims)
    for sim, unit in UNITS.items():
        assert unit.cls in MIX_CLASSES, (sim, unit.cls)
        assert unit.traffic in ("lsu", "tensor", "tma", "none"), (sim, unit.traffic)
        assert unit.wait in (None, "barrier", "mbarrier", "fence"), (sim, unit.wait)
        assert (unit.wait is None) or unit.cls == "sync", sim


def test_every_form_of_an_operation_reading_through_descriptors_is_async() -> None:
    """Each tcgen05.mma form (dense, sparse, .ashift) reads its shared
    operands through the async proxy, as wgmma does: the sanitizer keeps
    those reads in flight until the matching wait."""
    for inst in INSTRUCTIONS:
        if re.fullmatch(r"tcgen05\.mma(\.ws)?(\.sp)?|wgmma\.mma_async", inst.opcode):
            unit = UNITS[inst.sim]
            assert unit.cls == "tensor" and unit.async_reads is not None, (inst.opcode, inst.sim)
