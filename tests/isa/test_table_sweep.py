"""The table sweep: every form's generated examples assemble with ptxas, and
every form refuses a target it does not support.

One ptxas run per (target, version) group keeps this fast; a failing line is
traced back to the form that produced it.
"""

from __future__ import annotations

import os

import pytest

from jaxptx import isa
from jaxptx.errors import PtxTargetError, PtxVersionError
from jaxptx.isa._examples import example_modules, examples
from jaxptx.isa._families import FAMILIES
from jaxptx.runtime import parse_ptxas_errors
from jaxptx.runtime import ptxas as run_ptxas
from jaxptx.errors import PtxasError

def _selected() -> list[isa.Inst]:
    """All forms, or one family's (``JAXPTX_SWEEP_FAMILY=_memory``) while editing it."""
    family = os.environ.get("JAXPTX_SWEEP_FAMILY")
    if not family:
        return list(isa.INSTRUCTIONS)
    return [e for fam in FAMILIES if fam.__name__.endswith(family) for e in fam.ENTRIES]


SELECTED = _selected()
ALL_EXAMPLES = [ex for inst in SELECTED for ex in examples(inst)]
MODULES = example_modules(ALL_EXAMPLES)


def test_every_form_has_examples() -> None:
    missing = [i.form for i in SELECTED if not examples(i)]
    assert not missing, f"forms with no valid modifier combination: {missing}"


def test_every_modifier_value_is_exercised() -> None:
    seen: dict[int, set[tuple[str, str]]] = {}
    for ex in ALL_EXAMPLES:
        parts = ex.line.split()[0].rstrip(";").split(".")
        seen.setdefault(id(ex.inst), set()).update(("", p) for p in parts)
    for inst in SELECTED:
        if inst.example is not None:
            continue
        got = {p for _, p in seen.get(id(inst), set())}
        for s in inst.slots:
            for v in s.values:
                assert set(v.split(".")) <= got, f"{inst.form}: value .{v} never generated"


@pytest.mark.parametrize("key", list(MODULES), ids=lambda k: f"{k[0].name}-ptx{k[1][0]}{k[1][1]}")
def test_examples_assemble(key) -> None:
    text, where = MODULES[key]
    target, _ = key
    try:
        run_ptxas(text, target.name)
    except PtxasError as e:
        lines = {n: ex for n, ex in where}
        bad = []
        for d in parse_ptxas_errors(e.log):
            ex = lines.get(d.line)
            bad.append(f"  {ex.inst.form if ex else '?'}: `{ex.line if ex else d.line}` -> {d.message}")
        pytest.fail("ptxas rejected generated examples:\n" + "\n".join(bad[:40]))


def _older_target(req: isa.Requires) -> str | None:
    if req.only:
        return "sm_80" if not any(t.startswith("sm_8") for t in req.only) else "sm_75"
    if req.sm > 75:
        return "sm_75"
    return None


@pytest.mark.parametrize("inst", [i for i in SELECTED if _older_target(i.requires)],
                         ids=lambda i: i.form[:60])
def test_form_refuses_older_target(inst: isa.Inst) -> None:
    old = isa.parse_target(_older_target(inst.requires))
    with pytest.raises(PtxTargetError, match=rf"needs .*kernel targets {old.name}"):
        inst.requires.check(inst.opcode, old, (9, 0))


@pytest.mark.parametrize("inst", [i for i in SELECTED if i.requires.ptx > (6, 3)],
                         ids=lambda i: i.form[:60])
def test_form_refuses_older_ptx(inst: isa.Inst) -> None:
    target = isa.parse_target(inst.requires.only[0] if inst.requires.only else "sm_120a")
    with pytest.raises(PtxVersionError, match=r"needs PTX ISA \d+\.\d+, kernel declares 6\.3"):
        inst.requires.check(inst.opcode, target, (6, 3))
