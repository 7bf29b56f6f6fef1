"""The fidelity report of one launch (``Device.launch(fidelity=True)``):
:class:`Fidelity`, its :class:`Usage` per inexact instruction and its
:class:`Reach` per inexact value that decided more than a result."""

from __future__ import annotations

import dataclasses
from typing import Any

from ... import isa

__all__ = ["Fidelity", "Reach", "Usage"]


@dataclasses.dataclass(frozen=True)
class Usage:
    """How often an approximate or reading instruction ran, and why it is
    not exact.

    Attributes:
        count: thread-instructions executed (each thread whose guard let it
            run counts once).
        bounds: the error bounds the PTX ISA states (approximate forms).
        notes: what the ISA leaves open and what the emulator does.
    """

    count: int
    bounds: tuple[isa.Bound, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict: ``count``, ``bounds`` (each ``measure``,
        ``value``, ``ulps``, ``log2``, ``over``, ``text``) and ``note``."""
        return {"count": self.count,
                "bounds": [{"measure": b.measure, "value": b.value, "ulps": b.ulps, "log2": b.log2,
                            "over": b.over, "text": str(b)} for b in self.bounds],
                "note": "; ".join(self.notes)}


@dataclasses.dataclass(frozen=True)
class Reach:
    """A value of an approximate or reading instruction used where it
    decides more than a result.

    Attributes:
        line: the PTX line of the instruction that used it (``None`` when
            the kernel was not parsed from text); ``where``: its location as
            messages give it (``PTX line 12`` or ``file.py:41``).
        instruction: that instruction's spelling (``ld.global.f32``).
        reached: ``"address"``, ``"branch"`` or ``"barrier"``.
        origin_class: ``"approx"`` or ``"reading"``; ``origin_line``,
            ``origin_where``, ``origin_instruction``: the instruction the
            value came from.
    """

    line: int | None
    where: str
    instruction: str
    reached: str
    origin_class: str
    origin_line: int | None
    origin_where: str
    origin_instruction: str

    def __str__(self) -> str:
        article = "an" if self.reached == "address" else "a"
        return (f"{self.where} ({self.instruction}): {article} {self.reached} depends on {self.origin_where} "
                f"({self.origin_instruction}, {self.origin_class})")


class Fidelity:
    """The fidelity report of one launch (``Device.launch(fidelity=True)``).

    Attributes:
        exact: spelling → thread-instructions executed, for instructions
            the emulator runs with bit-exact PTX semantics.
        approximate: spelling → :class:`Usage` (with the ISA's bounds) for
            instructions whose result is only within the ISA's stated error.
        reading: spelling → :class:`Usage` (with its note) for instructions
            that follow the emulator's reading of a point the ISA leaves to
            figures or unspecified.
        reached: every :class:`Reach`: an approximate or reading value used
            as an address, in a branch or at a barrier (one per
            instruction, kind of use and origin class).
        findings: the sanitizer's findings when the launch ran with
            ``check="all"`` (else ``None``); ``profile``: the
            :class:`jaxptx.profile.Profile` when it ran with ``profile=True``.
    """

    def __init__(self, exact: dict[str, int], approximate: dict[str, Usage], reading: dict[str, Usage],
                 reached: list[Reach], findings: list | None = None, profile: Any = None) -> None:
        self.exact = exact
        self.approximate = approximate
        self.reading = reading
        self.reached = reached
        self.findings = findings
        self.profile = profile

    @property
    def is_exact(self) -> bool:
        """No approximate or reading instruction ran."""
        return not self.approximate and not self.reading

    def summary(self) -> str:
        """A few lines for people: the counts, each inexact instruction with
        its bound or note, and each value that reached more than a result."""
        lines = [f"fidelity: {sum(self.exact.values()):,} exact thread-instructions ({len(self.exact)} kinds)"
                 + ("; every instruction exact" if self.is_exact else "")]
        for name, u in sorted(self.approximate.items()):
            bound = "; ".join(str(b) for b in u.bounds) or "; ".join(u.notes)
            lines.append(f"  approximate {name} x{u.count:,}: {bound}")
        for name, u in sorted(self.reading.items()):
            lines.append(f"  reading {name} x{u.count:,}: {'; '.join(u.notes)}")
        if self.reached:
            lines.extend(f"  reached: {r}" for r in self.reached)
        elif not self.is_exact:
            lines.append("  no approximate or reading value reached an address, a branch or a barrier")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict with the keys ``exact``, ``approximate``,
        ``reading``, ``reached`` and ``is_exact``."""
        return {"exact": dict(self.exact),
                "approximate": {k: u.to_dict() for k, u in self.approximate.items()},
                "reading": {k: u.to_dict() for k, u in self.reading.items()},
                "reached": [dataclasses.asdict(r) for r in self.reached],
                "is_exact": self.is_exact}

    def __repr__(self) -> str:
        return (f"Fidelity(exact={len(self.exact)} kinds, approximate={sorted(self.approximate)}, "
                f"reading={sorted(self.reading)}, reached={len(self.reached)})")
