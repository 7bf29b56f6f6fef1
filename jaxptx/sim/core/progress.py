"""Long launches speak: progress reports and a wall-time bound.

A launch that runs longer than :data:`DEFAULT_PROGRESS_SECONDS` (5 s; the
environment variable ``JAXPTX_SIM_PROGRESS_SECONDS`` changes it, ``off``
turns it off) reports, every that many seconds, its steps so far, the
CTAs that have finished, its rate (steps and thread-instructions a
second) and where the threads are: the few PCs most threads are at, with
their PTX lines (Python lines for a traced kernel), their instruction
text, how many threads are there, and the loop around each. Reports go to
stderr when stderr is a terminal (a line each, and a closing line), and to
the ``logging`` logger ``jaxptx.sim`` otherwise: the first report of a
launch at ``WARNING`` (so that a notebook or a CI log shows it without
any logging set up), the later ones and the closing line at ``INFO``.

``max_seconds=`` (``sim.launch``, ``Device.launch``; the environment
variable ``JAXPTX_SIM_TIMEOUT`` when a launch passes none, which also
covers ``jax.jit`` on the CPU) bounds a launch by wall time: past it the
launch stops with a :class:`~jaxptx.sim.SimError` that draws the same
picture of where the threads are. There is no wall-time bound by default;
``max_steps`` still bounds every launch.

The cost: the machine looks at the clock only every few steps (at most
1024). The stride adapts so that looks come about every 50 ms whatever a
step costs, and the
machine's loop tests for a look in the comparison that already bounds
``max_steps``, so steps between looks pay nothing.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ... import ir
from ...emit import emit_statement
from ..errors import SimError
from .barriers import EXITED, PARKED, SPINNING, WAITING
from .naming import source_lines, thread_ranges, where

if TYPE_CHECKING:
    from .view import MachineView

__all__ = ["DEFAULT_PROGRESS_SECONDS", "LOGGER", "PROGRESS_ENV", "TIMEOUT_ENV", "Clock", "default_max_seconds",
           "environ_value", "instruction_text", "max_seconds_option", "progress_seconds", "setting", "where_threads"]

PROGRESS_ENV = "JAXPTX_SIM_PROGRESS_SECONDS"
"""The environment variable that sets how often a long launch reports (seconds, or ``off``)."""
TIMEOUT_ENV = "JAXPTX_SIM_TIMEOUT"
"""The environment variable that bounds a launch's wall time (seconds) when it passes no ``max_seconds``."""
DEFAULT_PROGRESS_SECONDS = 5.0
"""Seconds a launch runs before its first progress report, and between reports."""
LOGGER = logging.getLogger("jaxptx.sim")
"""Where progress reports go when stderr is not a terminal."""

_OFF = frozenset(["off", "none", "never", "no", "false"])
_LOOK_SECONDS = 0.05        # wall time between looks at the clock
_FIRST_STRIDE = 16          # steps before the first look (a step costs 1 us to 100 ms)
_MAX_STRIDE = 1024          # at 2 us a step, a look costs < 0.1%; a phase of slower steps is seen soon
_NEVER = 1 << 62            # a step no launch reaches
_TOP = 3                    # PCs a report names


# --- options ---------------------------------------------------------------------------------------

# os.environ's own dict (encoded keys and values) and its codecs: a lookup in it
# costs a dict lookup, where os.environ.get costs microseconds (its Mapping
# machinery), and a launch reads several variables. os.environ keeps it up to
# date on every change made through os.environ; without it (another Python),
# os.environ.get.
_ENVIRON = getattr(os.environ, "_data", None)
_ENCODE_KEY = getattr(os.environ, "encodekey", None)
_DECODE_VALUE = getattr(os.environ, "decodevalue", None)
_KEYS: dict[str, Any] = {}
# (variable, parse function) -> (the variable's raw value, what the function made of it)
_SETTINGS: dict[tuple[str, Any], tuple[Any, Any]] = {}


def environ_value(name: str) -> str | None:
    """``os.environ.get(name)`` at the cost of a dict lookup: what launches
    read their settings with, every launch, so that a variable changed
    between launches takes effect on the next one."""
    if _ENVIRON is None or _ENCODE_KEY is None or _DECODE_VALUE is None:
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE_KEY(name)
    raw = _ENVIRON.get(key)
    return None if raw is None else _DECODE_VALUE(raw)


def setting(name: str, parse: Any) -> Any:
    """``parse(value)`` of environment variable ``name`` (``None`` when
    unset), parsed again only when the variable's value changed since the
    last call with this ``parse``: a launch pays a dict lookup for each of
    its settings. ``parse`` raises for a malformed value, every time it is
    read (a bad value is never kept)."""
    if _ENVIRON is None or _ENCODE_KEY is None:
        return parse(os.environ.get(name))
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE_KEY(name)
    raw = _ENVIRON.get(key)
    held = _SETTINGS.get((name, parse))
    if held is not None and held[0] == raw:
        return held[1]
    value = parse(None if raw is None else _DECODE_VALUE(raw))
    _SETTINGS[(name, parse)] = (raw, value)
    return value


def _env_seconds(name: str, raw: str | None, zero: bool) -> float | None:
    """Seconds from environment variable ``name`` whose value is ``raw``:
    ``None`` when unset, empty or ``off``; ``zero``: whether 0 is a valid value."""
    text = (raw or "").strip().lower()
    if not text or text in _OFF:
        return None
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise SimError(f"{name}: expected a number of seconds {bound} (or 'off'), got {raw!r}")
    return None if math.isinf(value) else value


def progress_seconds() -> float | None:
    """Seconds between progress reports: ``JAXPTX_SIM_PROGRESS_SECONDS`` if
    set (``off`` turns reports off; 0 reports at every look at the clock,
    about every 50 ms), else :data:`DEFAULT_PROGRESS_SECONDS`.

    Raises:
        SimError: the variable is neither a number >= 0 nor ``off``.
    """
    return setting(PROGRESS_ENV, _progress_seconds)


def _progress_seconds(raw: str | None) -> float | None:
    if not (raw or "").strip():
        return DEFAULT_PROGRESS_SECONDS
    return _env_seconds(PROGRESS_ENV, raw, zero=True)


def default_max_seconds() -> float | None:
    """The wall-time bound of a launch that passes no ``max_seconds``:
    ``JAXPTX_SIM_TIMEOUT`` (seconds) if set, else ``None`` (no bound).

    Raises:
        SimError: the variable is neither a number > 0 nor ``off``.
    """
    return setting(TIMEOUT_ENV, _max_seconds)


def _max_seconds(raw: str | None) -> float | None:
    return _env_seconds(TIMEOUT_ENV, raw, zero=False)


def max_seconds_option(value: Any) -> float:
    """A launch's ``max_seconds`` argument (a number of seconds > 0;
    ``math.inf``: no bound, whatever ``JAXPTX_SIM_TIMEOUT`` says) as a float.

    Raises:
        SimError: anything else.
    """
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not ok or math.isnan(value) or value <= 0:
        raise SimError(f"launch max_seconds: expected a number of seconds > 0, got {value!r}")
    return float(value)


# --- where the threads are ---------------------------------------------------------------------------

def _line(ins: ir.Instruction) -> str:
    """``PTX line 12`` for parsed PTX, ``file.py:41`` for a traced kernel
    (as :func:`.naming.where` words them)."""
    return where(ins)[2:-1] or "no line information"


def instruction_text(ins: ir.Instruction) -> str:
    """The instruction as PTX text, without its ``;``."""
    return emit_statement(ins, style="canonical", depth=0).strip().removesuffix(";")


def _loops(m: "MachineView") -> list[tuple[int, int]]:
    """``(first, last)`` PCs of every backward branch's loop, innermost first."""
    code, labels = m.program.code, m.program.labels
    out = []
    for pc, ins in enumerate(code):
        if ins.opcode == "bra" and ins.operands and isinstance(ins.operands[0], ir.Symbol):
            target = labels.get(ins.operands[0].name)
            if target is not None and target <= pc:
                out.append((target, pc))
    return sorted(out, key=lambda loop: loop[1] - loop[0])


def _loop_of(m: "MachineView", loops: list[tuple[int, int]], pc: int) -> str:
    """`` in the loop at PTX lines 10-13`` for the innermost loop around ``pc``."""
    for first, last in loops:
        if first <= pc <= last:
            return f" in the loop at {source_lines(m, range(first, last + 1))}"
    return ""


def where_threads(m: "MachineView", detail: bool) -> str:
    """Where the live threads are: the :data:`_TOP` PCs most of them are
    at (a thread waiting at a barrier or parked on an mbarrier counts at
    its barrier or wait), each with its line, instruction, thread count
    (``detail``: which threads) and enclosing loop; then how many threads
    wait at barriers or are parked."""
    m.sync_pcs()
    live = np.flatnonzero(m.state != EXITED)
    if len(live) == 0:
        return "every thread has exited"
    pcs = m.pc[live] - np.isin(m.state[live], (WAITING, PARKED))
    values, counts = np.unique(pcs, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    loops = _loops(m)
    parts = []
    for k in order[:_TOP]:
        pc, n = int(values[k]), int(counts[k])
        if not 0 <= pc < len(m.program.code):
            parts.append(f"{n} threads at PC {pc}")
            continue
        ins = m.program.code[pc]
        who = thread_ranges(m, live[pcs == pc]) if detail else f"{n} thread{'s' if n > 1 else ''}"
        parts.append(f"{who} at {_line(ins)} `{instruction_text(ins)}`{_loop_of(m, loops, pc)}")
    if len(values) > _TOP:
        parts.append(f"{int(counts[order[_TOP:]].sum())} threads at {len(values) - _TOP} other PCs")
    waiting = int(np.count_nonzero(m.state == WAITING))
    parked = int(np.count_nonzero(m.state == PARKED))
    spinning = int(np.count_nonzero(m.state == SPINNING))
    tail = [f"{n} {what}" for n, what in ((waiting, "waiting at barriers"), (parked, "parked on mbarriers"),
                                          (spinning, "spinning without changing anything")) if n]
    return "; ".join(parts) + (f" ({', '.join(tail)})" if tail else "")


def _ctas_finished(m: "MachineView") -> str:
    done = int((m.state.reshape(m.nctas, m.ntid) == EXITED).all(axis=1).sum()) if m.nthreads else 0
    return f"{done:,} of {m.nctas:,} CTAs finished"


def _si(x: float) -> str:
    """``3.9 M `` for 3.9e6 (a prefix for a unit that follows)."""
    for scale, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if x >= scale:
            return f"{x / scale:.1f}{unit} "
    return f"{x:.0f} "


# --- the clock -----------------------------------------------------------------------------------------

class Clock:
    """A launch's view of the wall clock: progress reports and the
    ``max_seconds`` bound.

    The machine calls :meth:`look` when its step count reaches the step
    :meth:`look` (or :attr:`next`) returned, and :meth:`finish` when the
    launch ends.

    Args:
        m: the machine.
        max_seconds: the wall-time bound (``None`` or ``inf``: none).
        every: seconds between progress reports (``None``: no reports).
        stream: where reports go (``None``: stderr if it is a terminal,
            else :data:`LOGGER`).
    """

    def __init__(self, m: "MachineView", max_seconds: float | None, every: float | None,
                 stream: TextIO | None = None) -> None:
        self.m = m
        self.start = time.monotonic()
        self.max_seconds = max_seconds
        self.deadline = None if max_seconds is None or math.isinf(max_seconds) else self.start + max_seconds
        self.every = every
        self.report_at = None if every is None else self.start + every
        self.stream = stream
        self._pick = stream is None         # stderr or the logger: decided at the first report
        self.reports = 0
        self._last = (self.start, 0)
        self.stride = _FIRST_STRIDE
        self.next = _FIRST_STRIDE if (self.deadline is not None or self.report_at is not None) else _NEVER

    def look(self, steps: int, thread_steps: int) -> int:
        """Look at the clock at step ``steps``: raise past the deadline,
        report when a report is due; return the step of the next look.

        Raises:
            SimError: the launch has run longer than ``max_seconds``.
        """
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            raise SimError(self._timeout_message(now, steps))
        if self.report_at is not None and now >= self.report_at:
            self._report(now, steps, thread_steps)
            self.report_at = now + self.every
        then, before = self._last
        if steps > before and now > then:
            per_step = (now - then) / (steps - before)
            # Shrink at once, grow at most twofold: steps can get costlier in a later phase.
            self.stride = max(1, min(_MAX_STRIDE, 2 * self.stride, int(_LOOK_SECONDS / per_step)))
        self._last = (now, steps)
        self.next = steps + self.stride
        return self.next

    def finish(self, ok: bool) -> None:
        """The launch ended (``ok``: every thread exited): close the report
        line of a launch that reported."""
        if not self.reports:
            return
        m = self.m
        took = time.monotonic() - self.start
        done = f"{m.program.name}: finished after {took:.1f} s, {m.steps:,} steps"
        if self.stream is None:
            if ok:
                LOGGER.info("%s", done)
            return
        if ok:
            self._write(done)

    def _report(self, now: float, steps: int, thread_steps: int) -> None:
        m = self.m
        if self._pick:                      # asked here, not per launch: most launches never report
            self._pick = False
            if sys.stderr is not None and _isatty(sys.stderr):
                self.stream = sys.stderr
        took = max(now - self.start, 1e-9)
        line = (f"{m.program.name}: running for {took:.1f} s: {steps:,} steps ({_si(steps / took)}steps/s, "
                f"{_si(thread_steps / took)}thread-instructions/s), {_ctas_finished(m)}; "
                f"{where_threads(m, detail=False)}")
        self.reports += 1
        if self.stream is None:
            if self.reports == 1:
                LOGGER.warning("%s [every %g s: %s; max_seconds= or %s bounds a launch]",
                               line, self.every, PROGRESS_ENV, TIMEOUT_ENV)
            else:
                LOGGER.info("%s", line)
            return
        if self.reports == 1:
            line += f" [every {self.every:g} s: {PROGRESS_ENV}; max_seconds= or {TIMEOUT_ENV} bounds a launch]"
        self._write(line)

    def _write(self, line: str) -> None:
        """One whole line on the terminal (never cut or rewritten: a report
        is often wider than the terminal, and a wrapped line cannot be
        rewritten in place)."""
        try:
            self.stream.write(f"jaxptx.sim: {line}\n")
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None          # a closed terminal: go on through logging

    def _timeout_message(self, now: float, steps: int) -> str:
        m = self.m
        return (f"{m.program.name}: still running after {now - self.start:.1f} s (max_seconds="
                f"{self.max_seconds:g}), {steps:,} steps, {_ctas_finished(m)}; "
                f"{where_threads(m, detail=True)}. Raise max_seconds (sim.launch / Device.launch, or "
                f"{TIMEOUT_ENV}) if the kernel is just long.")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
