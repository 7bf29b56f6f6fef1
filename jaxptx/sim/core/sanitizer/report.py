"""Findings: what the sanitizer reports, and how it names places and threads."""

from __future__ import annotations

import dataclasses

from .... import ir
from ...errors import SimError

__all__ = ["SanitizerError", "Finding", "Reporting"]


class SanitizerError(SimError):
    """A bug the sanitizer found; ``findings`` holds every finding (one with
    ``check=True``)."""

    def __init__(self, message: str, findings: list["Finding"] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


@dataclasses.dataclass(frozen=True)
class Finding:
    """One sanitizer finding.

    Attributes:
        kind: ``race``, ``uninitialised``, ``async`` (async data used before
            its completion was observed), ``proxy`` (missing
            ``fence.proxy.async``) or ``divergence``.
        message: the full report.
        line: where the finding's access is (PTX line or file:line) and
            ``other``: the other access's, when there is one.
        device: in a node launch (:class:`jaxptx.sim.System`), the device
            of the finding's access, and ``other_device`` the other
            access's when it is another device's (or another grid's);
            ``None`` on a lone device.
    """

    kind: str
    message: str
    line: str
    other: str = ""
    device: int | None = None
    other_device: int | None = None


class Reporting:
    """Recording findings and naming instructions and threads in them."""

    def report(self, kind: str, message: str, line: str, other: str = "", other_device: int | None = None) -> None:
        """Record a finding; raise at once unless collecting (``check="all"``)."""
        finding = Finding(kind, "sanitizer: " + message, line, other, self.device, other_device)
        if self.mode != "all":
            raise SanitizerError(finding.message, [finding])
        key = (kind, line, other, other_device)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(finding)

    def at(self, thread: int, pc: int | None = None) -> str:
        """``PTX line 12 (ld.shared.u32), CTA (0, 0, 0) thread (5, 0, 0)``."""
        return f"{self.line(self.pc if pc is None else pc)}, {self.who(thread)}"

    def line(self, pc: int) -> str:
        """Where the instruction at ``pc`` came from, and its name."""
        code = self.m.program.code
        ins = code[pc] if 0 <= pc < len(code) else None
        if ins is None:
            return "?"
        if ir.ptx_line(ins.loc) is not None:
            return f"{ins.loc} ({ins.name})"
        where = ir.python_location(ins.loc)
        return f"{where.file}:{where.line} ({ins.name})" if where is not None else ins.name

    def who(self, thread: int) -> str:
        """``CTA (x, y, z) thread (x, y, z)`` of a global thread index
        (``device d CTA ...`` in a node launch)."""
        m = self.m
        cta, tid = divmod(int(thread), m.ntid)
        bx, by, _ = m.block
        gx, gy, _ = m.grid
        device = "" if self.device is None else f"device {self.device} "
        return (f"{device}CTA ({cta % gx}, {(cta // gx) % gy}, {cta // (gx * gy)}) thread "
                f"({tid % bx}, {(tid // bx) % by}, {tid // (bx * by)})")

    def _thread_at(self, thread: int, tid: int) -> str:
        """The CTA-local thread ``tid`` of ``thread``'s CTA, as ``thread (x, y, z)``."""
        return "thread " + self.who(int(thread) // self.ntid * self.ntid + int(tid)).split(" thread ")[1]
