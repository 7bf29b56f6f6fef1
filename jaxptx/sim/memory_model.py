"""The host memory an emulated launch needs, and the limit it must fit in.

The emulator runs every thread of the grid at once, so a launch holds, for
its whole run, one numpy array per register over every thread, and per CTA
its shared (and tensor) memory. :func:`estimate` states those bytes from
the prepared program and the launch shape, before anything is allocated;
:func:`check_fits` refuses a launch whose estimate is over
:func:`memory_limit` with a :class:`~.errors.SimMemoryError` that says where
the bytes go and what to do.

What is counted (each constant below was measured with ``tracemalloc`` on
the library softmax, 1,024 to 16,384 rows of 1,024 f32, and the sm_80,
sm_90a and sm_100a library GEMMs at 256³ and 512³;
``benchmarks/memory.py`` prints the table):

* **per thread**: the register file (every declared register the code uses,
  at its storage width: 1 byte a predicate, 2/4/8/16 bytes by type
  width, :func:`~.numerics.values.bits_dtype`), the machine's own per-thread
  arrays (PC, state, barrier bookkeeping: :data:`THREAD_STATE`), local
  memory, and the temporaries of the widest step (:data:`STEP_WORKSPACE`:
  addresses, byte offsets and gathered values over every thread);
* **per CTA**: shared memory (static and dynamic, padded to 16 bytes), the
  barrier counters (:data:`CTA_STATE`), tensor memory for a kernel that
  allocates it (``tcgen05.alloc``: 128 lanes x 512 columns of 4 bytes), and
  the index maps and tiles of tensor-core and bulk-copy steps, about
  :data:`COPY_WORKSPACE` times the shared memory;
* **per launch**: the device's global memory (the allocations it holds, and
  the arrays :func:`jaxptx.sim.launch` is about to copy in) and a fixed
  :data:`LAUNCH_FIXED` (the prepared program, caches);
* **with the sanitizer** (``check``): per thread, its own clock entry and
  the index of the shared clock row holding the rest (12 bytes); per CTA,
  clock rows of an entry per thread of the CTA (4 bytes each; 16 more
  entries once the kernel uses mbarriers), a row per warp and two more
  (threads that synchronised together share a row); per thread, a defined flag (a byte) per register, the async-group
  counters and their temporaries (:data:`CHECK_THREAD`) and a shadow byte
  per local byte; per CTA, the shared-memory shadow
  (:data:`CHECK_SHARED` bytes per shared byte, :data:`CHECK_CLUSTER` more
  when distributed shared memory is checked); per launch,
  :data:`CHECK_GLOBAL` bytes per byte of global memory (the per-cell
  records of each buffer, or the log of reads of a buffer nothing writes).

Not counted: the arrays the caller holds (they exist before the launch),
the profiler's counters (``profile=True``: the 1,024-row softmax peaked at
91 MiB profiled against 73 MiB), the record of written bytes of a traced
kernel's outputs (a byte per output byte, after the run), and the other
grids of a :meth:`~jaxptx.sim.Device.launch_sequence` (each grid is checked
alone). The estimate is within :data:`MARGIN` of the measured peak on every
launch measured (from -20% to +20%; 6 of 12 within 10%): above it where the
sanitizer logs the reads of a read-only buffer rather than recording them,
below it on checked sm_100a GEMMs (more tensor-core copies in flight).
Launches of a few MiB are above it by up to :data:`LAUNCH_FIXED`: none is
near a limit.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any

from ..launch import Launch
from .core.program import Program
from .core.sanitizer.values import remote_mbarrier
from .errors import SimError, SimMemoryError
from .numerics.values import bits_dtype

__all__ = ["MemoryEstimate", "estimate", "memory_limit", "host_memory", "parse_bytes", "check_fits",
           "MAX_MEMORY_ENV", "DEFAULT_FRACTION", "MARGIN"]

MAX_MEMORY_ENV = "JAXPTX_SIM_MAX_MEMORY"
# A launch may use up to 3/4 of the host's memory by default: the estimate
# is within ±30% of the peak, so a launch estimated at 3/4 can reach all of
# it, and the process (Python, JAX, XLA's own copies of the buffers) needs
# the rest. Past the host's memory the OS swaps or the OOM killer ends the
# process with no message; a refusal names the launch and the fix.
DEFAULT_FRACTION = 0.75
MARGIN = 0.30
"""The stated margin of :func:`estimate` against the measured peak (±)."""

THREAD_STATE = 67 + 16      # LaunchState's per-thread arrays (67 bytes) and special-register caches
STEP_WORKSPACE = 208        # the widest step's temporaries: measured 203-212 bytes a thread (softmax)
CTA_STATE = 144             # bar.arrive counts (16 x 8), cluster arrivals and phases
COPY_WORKSPACE = 4          # x shared bytes: tensor-core / bulk-copy index maps and tiles (3.2-6.2 measured)
LAUNCH_FIXED = 2 << 20      # the prepared program, caches
TENSOR_MEMORY = 128 * 512 * 4 + 512     # a CTA's cells and held-column flags
CHECK_THREAD = 65 + 68      # async-group counters, fenced flag, clock index; step temporaries
MBARRIER_COLUMNS = 16       # the vector clocks' first block of mbarrier columns
CLOCK_THREAD = 12           # a thread's own clock entry (int32) and its row's index (int64)
CHECK_SHARED = 38           # shadow records per shared byte (21-29 measured: 13, and 2 a warp slot in use) and checked
                            # tensor-core and copy steps' temporaries (3-13 measured)
CHECK_CLUSTER = 7           # distributed-shared-memory records per shared byte
CHECK_GLOBAL = 8            # shadow records or read log per global byte (7-25 measured; 8 balances them since
                            # a write-only buffer keeps no read tags)

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_BYTES = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """The host bytes one emulated launch needs (see the module docstring).

    Attributes:
        name: the kernel. threads, ctas: the launch's threads and CTAs.
        checked: whether the sanitizer's shadow state is counted.
        thread_parts, cta_parts, launch_parts: ``(what, bytes)`` of each
            part: per thread, per CTA, and once for the launch.
    """

    name: str
    threads: int
    ctas: int
    checked: bool
    thread_parts: tuple[tuple[str, int], ...]
    cta_parts: tuple[tuple[str, int], ...]
    launch_parts: tuple[tuple[str, int], ...]

    @property
    def per_thread(self) -> int:
        """Bytes each thread needs."""
        return sum(n for _, n in self.thread_parts)

    @property
    def per_cta(self) -> int:
        """Bytes each CTA needs (besides its threads')."""
        return sum(n for _, n in self.cta_parts)

    @property
    def per_launch(self) -> int:
        """Bytes the launch needs once (global memory and fixed costs)."""
        return sum(n for _, n in self.launch_parts)

    @property
    def total(self) -> int:
        """All the bytes: ``threads * per_thread + ctas * per_cta + per_launch``."""
        return self.threads * self.per_thread + self.ctas * self.per_cta + self.per_launch

    @property
    def sanitizer(self) -> int:
        """The part of :attr:`total` that is the sanitizer's (0 unchecked)."""
        def part(parts, times):
            return times * sum(n for what, n in parts if what.startswith("sanitizer"))
        return part(self.thread_parts, self.threads) + part(self.cta_parts, self.ctas) + part(self.launch_parts, 1)

    def describe(self) -> str:
        """The parts in words: ``1,136 bytes a thread (registers 757, ...)``."""
        def listed(parts):
            return ", ".join(f"{what} {n:,}" for what, n in parts if n)
        text = (f"{self.per_thread:,} bytes a thread ({listed(self.thread_parts)}) x {self.threads:,} threads "
                f"= {size_text(self.threads * self.per_thread)}; {self.per_cta:,} bytes a CTA "
                f"({listed(self.cta_parts)}) x {self.ctas:,} CTAs = {size_text(self.ctas * self.per_cta)}; "
                f"{size_text(self.per_launch)} for the launch ({listed(self.launch_parts)} bytes)")
        if self.checked:
            text += f"; the sanitizer (check) is {size_text(self.sanitizer)} of it"
        return text


def size_text(n: int) -> str:
    """``n`` bytes for a message: ``1.2 GiB``, ``340.5 MiB``, ``12.0 KiB``, ``16 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):,.1f} {unit}"
    return f"{n:,} bytes"


def estimate(program: Program, launch: Launch, *, check: Any = False, global_bytes: int = 0) -> MemoryEstimate:
    """The host bytes a launch of ``program`` needs (see the module docstring).

    Args:
        program: the prepared entry (:func:`jaxptx.sim.core.prepare.prepare`).
        launch: its checked launch shape.
        check: a sanitizer mode (anything true counts the shadow state).
        global_bytes: bytes of global memory the launch's device holds.

    Returns:
        The :class:`MemoryEstimate`.
    """
    ntid, checked = launch.threads, bool(check)
    shared = -(-(-(-program.shared_size // 16) * 16 + launch.smem) // 16) * 16
    sims = {r.inst.sim for r in program.resolved if r is not None}
    threads = [("registers", _register_bytes(program)), ("machine state", THREAD_STATE),
               ("step workspace", STEP_WORKSPACE), ("local memory", program.local_size)]
    ctas = [("shared memory", shared), ("barriers", CTA_STATE), ("copy workspace", COPY_WORKSPACE * shared),
            ("tensor memory", TENSOR_MEMORY if "tcgen05_alloc" in sims else 0)]
    once = [("global memory", int(global_bytes)), ("fixed", LAUNCH_FIXED)]
    if checked:
        mbarriers = any("mbarrier" in s or s.startswith("tcgen05_commit") for s in sims if s)
        row = 4 * (ntid + (MBARRIER_COLUMNS if mbarriers else 0))
        threads += [("sanitizer clocks", CLOCK_THREAD), ("sanitizer registers", len(program.registers) + CHECK_THREAD),
                    ("sanitizer local", program.local_size)]
        ctas.append(("sanitizer clock rows", row * (2 + -(-ntid // 32))))
        cluster = launch.cluster[0] * launch.cluster[1] * launch.cluster[2] > 1 and \
            not any(remote_mbarrier(ins) for ins in program.code if ins is not None)
        ctas.append(("sanitizer shared", (CHECK_SHARED + (CHECK_CLUSTER if cluster else 0)) * shared))
        once.append(("sanitizer global", CHECK_GLOBAL * int(global_bytes)))
    return MemoryEstimate(program.name, ntid * launch.blocks, launch.blocks, checked, tuple(threads),
                          tuple(ctas), tuple(once))


def quick_bound(program: Program, launch: Launch, *, check: Any = False, global_bytes: int = 0) -> int:
    """An upper bound on :func:`estimate`'s total in O(1) (16 bytes a
    register, the sanitizer's most per byte), so that a launch far under
    the limit skips the exact count."""
    ntid, nctas = launch.threads, launch.blocks
    shared = program.shared_size + launch.smem + 32
    per_thread = 16 * len(program.registers) + THREAD_STATE + STEP_WORKSPACE + program.local_size
    per_cta = (1 + COPY_WORKSPACE) * shared + CTA_STATE + TENSOR_MEMORY
    once = int(global_bytes) + LAUNCH_FIXED
    if check:
        per_thread += 4 * (ntid + MBARRIER_COLUMNS) + len(program.registers) + CHECK_THREAD + program.local_size
        per_cta += (CHECK_SHARED + CHECK_CLUSTER) * shared
        once += CHECK_GLOBAL * int(global_bytes)
    return ntid * nctas * per_thread + nctas * per_cta + once


def _register_bytes(program: Program) -> int:
    """Bytes a thread's registers take (each at its storage width)."""
    total = 0
    for t in program.registers.values():
        try:
            total += bits_dtype(t).itemsize
        except SimError:        # a type the emulator refuses when the register is used
            total += max(1, t.bits // 8)
    return total


def parse_bytes(text: str, name: str = MAX_MEMORY_ENV) -> int:
    """A byte count: digits with an optional ``K``/``M``/``G``/``T`` suffix
    (powers of 1024; ``KB``, ``KiB`` are the same), ``_`` allowed.

    Raises:
        SimError: anything else, or a count below 1 byte, naming ``name``.
    """
    m = _BYTES.fullmatch(str(text).strip().replace("_", ""))
    value = float(m.group(1)) * _SUFFIXES[m.group(2).upper()] if m else 0
    if value < 1:
        raise SimError(f"{name}: expected a byte count >= 1 such as 8G, 512M or 1000000 (K/M/G/T: powers of "
                       f"1024), or 'none' for no limit; got {text!r}")
    return int(value)


@functools.lru_cache(maxsize=1)
def host_memory() -> int:
    """Bytes of memory this process may use: the host's physical memory
    (``SC_PHYS_PAGES * SC_PAGE_SIZE``; ``psutil`` where ``sysconf`` has no
    answer and it is installed), capped by the cgroup's limit (a container's
    ``memory.max``). 0 where nothing says."""
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        have = 0
    if have <= 0:
        try:
            import psutil  # optional: only where sysconf cannot say (Windows)
            have = int(psutil.virtual_memory().total)
        except ImportError:
            have = 0
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < (have or 1 << 62):
            have = int(text)
    return max(have, 0)


def memory_limit() -> int | None:
    """The bytes a launch may need: ``JAXPTX_SIM_MAX_MEMORY`` (``none``: no
    limit) if set, else :data:`DEFAULT_FRACTION` of :func:`host_memory`
    (``None`` where the host does not say).

    Raises:
        SimError: the variable is set to something other than a byte count or ``none``.
    """
    return _limit(os.environ.get(MAX_MEMORY_ENV, ""))


@functools.lru_cache(maxsize=8)
def _limit(text: str) -> int | None:
    """:func:`memory_limit` for the variable's text (kept: a launch reads it every time)."""
    text = text.strip()
    if text.lower() == "none":
        return None
    if text:
        return parse_bytes(text)
    have = host_memory()
    return int(have * DEFAULT_FRACTION) if have else None


def check_fits(program: Program, launch: Launch, *, check: Any = False, global_bytes: int = 0) -> None:
    """Refuse, before anything is allocated, a launch whose :func:`estimate`
    is over :func:`memory_limit`; a launch under it is not touched.

    Raises:
        SimMemoryError: the estimate is over the limit; the message gives
            both, the bytes per thread and per CTA, and what to do.
        SimError: a bad ``JAXPTX_SIM_MAX_MEMORY``.
    """
    limit = memory_limit()
    if limit is None or quick_bound(program, launch, check=check, global_bytes=global_bytes) <= limit:
        return
    e = estimate(program, launch, check=check, global_bytes=global_bytes)
    if e.total <= limit:
        return
    setting = os.environ.get(MAX_MEMORY_ENV, "").strip()
    where = (f"{MAX_MEMORY_ENV}={setting}" if setting else
             f"{DEFAULT_FRACTION:.0%} of the {size_text(host_memory())} this host has; {MAX_MEMORY_ENV} sets it")
    unchecked = estimate(program, launch, global_bytes=global_bytes).total if e.checked else 0
    hint = (f"; without check it needs {size_text(unchecked)}"
            if e.checked and unchecked <= limit else "")
    fit = max(0, (limit - e.per_launch) // (e.per_cta + launch.threads * e.per_thread))
    advice = (f"Launch a smaller grid (at most {fit:,} CTAs of {launch.threads} threads fit; split the work over "
              f"several launches)" if fit else
              f"Not one CTA fits beside the launch's {size_text(e.per_launch)} of global memory and fixed costs: "
              f"hold less device memory")
    gib = f"{e.total / 2**30:,.1f} GiB" if e.total >= 1 << 30 else f"{e.total / 2**30:.2g} GiB ({size_text(e.total)})"
    raise SimMemoryError(
        f"launch of {program.name}: {e.threads:,} threads ({e.ctas:,} CTAs of {launch.threads}) need about "
        f"{gib} of emulator state (over the limit of {size_text(limit)}: {where}): {e.describe()}{hint}. "
        f"{advice}, or raise {MAX_MEMORY_ENV} (bytes, K/M/G suffixes; none: no limit).",
        e, limit)
