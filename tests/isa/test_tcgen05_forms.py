"""The table's ``tcgen05`` entries other than the MMA, checked against ptxas
both ways: every modifier combination of ``alloc``, ``dealloc``,
``relinquish_alloc_permit``, ``ld``, ``st``, ``wait``, ``fence``, ``commit``,
``cp`` and ``shift`` (including combinations the PTX ISA does not allow) is
written out here, independently of the table, and the table must accept
exactly the lines ptxas assembles for sm_100a; the register-vector length of
``tcgen05.ld``/``st`` must be the PTX ISA's Table 49 count. Then each
instruction's targets: the table and ptxas agree on which of the sm_100
family (and sm_120a, outside it) runs it.

All candidate lines of a target go into one module, one ``.entry`` each
(``.cta_group::1`` and ``::2`` may not share a kernel); ptxas's diagnostics
are traced back to the line they name, and the lines it did not name go
round again until it accepts them (it checks state spaces and targets only
once a module parses).
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import pytest

from jaxptx import isa
from jaxptx.errors import PtxasError, PtxModifierError
from jaxptx.runtime import parse_ptxas_errors, ptxas

GROUPS = ("cta_group::1", "cta_group::2")
SHAPES = ("16x64b", "16x128b", "16x256b", "32x32b", "16x32bx2")
NUMS = ("x1", "x2", "x4", "x8", "x16", "x32", "x64", "x128")
PER_X1 = {"16x128b": 2, "16x256b": 4}            # PTX ISA Table 49: registers of one .x1
CP_SHAPES = ("128x256b", "4x256b", "128x128b", "64x128b", "32x128b")
CP_MULTICAST = (None, "warpx2::02_13", "warpx2::01_23", "warpx4")
CP_FORMATS = (None, "b8x16.b6x16_p32", "b8x16.b4x16_p64", "b8x16", "b6x16_p32", "b4x16_p64")


class Line(NamedTuple):
    """One candidate instruction: its opcode and modifiers as the table
    splits them, its operand text and count, and the length of its register
    vector (``tcgen05.ld``/``st``)."""
    opcode: str
    mods: tuple[str, ...]
    operands: str
    count: int
    vector: int | None = None

    @property
    def text(self) -> str:
        return ".".join((self.opcode, *self.mods)) + (f" {self.operands};" if self.operands else ";")


def _regs(n: int) -> str:
    return "{" + ", ".join(f"%r{i}" for i in range(n)) + "}"


def _mods(*parts: str | None) -> tuple[str, ...]:
    return tuple(p for part in parts if part for p in part.split("."))


def _allocation() -> list[Line]:
    out = []
    for group, space, cols in itertools.product(GROUPS, (None, "shared::cta", "shared::cluster"), ("32", "%r1")):
        out.append(Line("tcgen05.alloc", _mods(group, "sync.aligned", space, "b32"), f"[%rd1], {cols}", 2))
    for group, cols in itertools.product(GROUPS + (None,), ("64", "%r1")):
        out.append(Line("tcgen05.dealloc", _mods(group, "sync.aligned", "b32"), f"%r2, {cols}", 2))
    for group in GROUPS + (None,):
        out.append(Line("tcgen05.relinquish_alloc_permit", _mods(group, "sync.aligned"), "", 0))
    return out


def _moves() -> list[Line]:
    out = []
    for kind, shape, num, packing in itertools.product(("ld", "st"), SHAPES, NUMS,
                                                       (None, "pack::16b", "unpack::16b")):
        n = PER_X1.get(shape, 1) * int(num[1:])
        split = ", 2" if shape == "16x32bx2" else ""
        mods = _mods("sync.aligned", shape, num, packing, "b32")
        if kind == "ld":
            out.append(Line("tcgen05.ld", mods, f"{_regs(n)}, [%r600]{split}", 3 if split else 2, n))
        else:
            out.append(Line("tcgen05.st", mods, f"[%r600]{split}, {_regs(n)}", 3 if split else 2, n))
    return out


def _ordering() -> list[Line]:
    out = [Line("tcgen05", _mods(op, "sync.aligned"), "", 0) for op in ("wait::ld", "wait::st", "wait::mma")]
    out += [Line("tcgen05", _mods(op), "", 0) for op in ("fence::before_thread_sync", "fence::after_thread_sync")]
    for group, space, multicast in itertools.product(GROUPS, (None, "shared::cluster", "shared::cta"),
                                                     (None, "multicast::cluster")):
        mods = _mods(group, "mbarrier::arrive::one", space, multicast, "b64")
        mask = ", %rs1" if multicast else ""
        out.append(Line("tcgen05.commit", mods, f"[%rd1]{mask}", 2 if multicast else 1))
    return out


def _copies() -> list[Line]:
    out = []
    for group, shape, multicast, fmt in itertools.product(GROUPS, CP_SHAPES, CP_MULTICAST, CP_FORMATS):
        out.append(Line("tcgen05.cp", _mods(group, shape, multicast, fmt), "[%r600], %rd1", 2))
    for group, direction in itertools.product(GROUPS, ("down", "up")):
        out.append(Line("tcgen05.shift", _mods(group, direction), "[%r600]", 1))
    return out


LINES = _allocation() + _moves() + _ordering() + _copies()


def _module(target: str, version: str, lines: list[Line]) -> tuple[str, dict[int, Line]]:
    """One ``.entry`` per line; the map from PTX line number to candidate."""
    text = [f".version {version}", f".target {target}", ".address_size 64"]
    where = {}
    for i, line in enumerate(lines):
        text += [f".visible .entry e{i}()", "{", "\t.reg .b32 %r<601>;", "\t.reg .b64 %rd<4>;",
                 "\t.reg .b16 %rs<4>;"]
        where[len(text) + 1] = line
        text += ["\t" + line.text, "\tret;", "}"]
    return "\n".join(text) + "\n", where


@functools.lru_cache(maxsize=None)
def ptxas_rejects(target: str, version: str, lines: tuple[Line, ...]) -> dict[Line, str]:
    """The candidates ptxas rejects for ``target``, with its first message.

    ptxas reports the later checks (state spaces, targets) only for a module
    that parsed cleanly, so the lines left after each run go round again
    until ptxas accepts them all."""
    bad: dict[Line, str] = {}
    left = list(lines)
    while left:
        text, where = _module(target, version, left)
        try:
            ptxas(text, target)
            return bad
        except PtxasError as e:
            found = {where[d.line]: d.message for d in reversed(parse_ptxas_errors(e.log)) if d.line in where}
            assert found, f"ptxas failed on no candidate line:\n{e.log[:2000]}"
            bad.update(found)
            left = [line for line in left if line not in found]
    return bad


def table_accepts(line: Line) -> bool:
    """The table resolves the modifiers to a form taking this many operands,
    with this register-vector length."""
    try:
        r = isa.resolve(line.opcode, line.mods, line.count)
    except PtxModifierError:
        return False
    lo, hi = isa.arity(r)
    if not lo <= line.count <= hi:
        return False
    if line.vector is not None:
        vectors = [o for o in isa.active_operands(r) if "vec" in o.kinds]
        return len(vectors) == 1 and isa.vector_count(vectors[0], r.values) == line.vector
    return True


@pytest.mark.parametrize("family", ["allocation", "moves", "ordering", "copies"])
def test_table_accepts_exactly_what_ptxas_assembles_for_sm100a(family: str) -> None:
    lines = {"allocation": _allocation, "moves": _moves, "ordering": _ordering, "copies": _copies}[family]()
    rejected = ptxas_rejects("sm_100a", "8.7", tuple(lines))
    wrong = [f"  {line.text[:110]}: table {'accepts' if table_accepts(line) else 'refuses'}, ptxas "
             + (f"refuses ({rejected[line]})" if line in rejected else "accepts")
             for line in lines if table_accepts(line) == (line in rejected)]
    assert not wrong, "the table and ptxas disagree:\n" + "\n".join(wrong)
    assert len(rejected) < len(lines), "every candidate was refused"


def test_every_non_mma_tcgen05_entry_is_exercised() -> None:
    forms = {id(i) for i in isa.INSTRUCTIONS if i.opcode.startswith("tcgen05") and ".mma" not in i.opcode
             and i.opcode != "tcgen05.mma"}
    seen = {id(isa.resolve(line.opcode, line.mods, line.count).inst) for line in LINES if table_accepts(line)}
    assert forms and forms <= seen, [i.form for i in isa.INSTRUCTIONS if id(i) in forms - seen]


TARGETS = [("sm_100a", "8.7"), ("sm_100f", "8.8"), ("sm_103a", "8.8"), ("sm_110a", "9.0"), ("sm_110f", "9.0"),
           ("sm_120a", "8.7")]


@pytest.mark.parametrize("target,version", TARGETS)
def test_targets_agree_with_ptxas(target: str, version: str) -> None:
    # One accepted line per table form.
    by_form: dict[int, Line] = {}
    for line in LINES:
        if table_accepts(line):
            by_form.setdefault(id(isa.resolve(line.opcode, line.mods, line.count).inst), line)
    lines = tuple(by_form.values())
    rejected = ptxas_rejects(target, version, lines)
    t, v = isa.parse_target(target), isa.parse_version(version)
    wrong = []
    for line in lines:
        r = isa.resolve(line.opcode, line.mods, line.count)
        reqs = [r.inst.requires] + [s.requirement(r.values[s.name]) for s in r.inst.slots
                                    if s.name in r.values and s.requirement(r.values[s.name])]
        allowed = all(req.allows(t, v) for req in reqs)
        if allowed == (line in rejected):
            wrong.append(f"  {line.text[:90]}: table {'allows' if allowed else 'refuses'} {target}, ptxas "
                         + (f"refuses ({rejected[line]})" if line in rejected else "accepts"))
    assert not wrong, "the table and ptxas disagree on targets:\n" + "\n".join(wrong)
