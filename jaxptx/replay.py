"""Replay a captured launch on the emulator: ``python -m jaxptx.replay FILE``.

A capture (:mod:`jaxptx.capture`: set ``JAXPTX_CAPTURE_DIR`` and launch, on
any machine, through either FFI handler, ``jaxptx.torch`` or
:meth:`jaxptx.sim.Device.launch`) holds a launch's PTX, parameters and
memory before and after. :func:`run` places the memory on a fresh
:class:`jaxptx.sim.Device`, launches the kernel with the same parameters and
compares every buffer with the recorded one:

* **byte for byte**, unless the launch ran on a GPU (``source == "cuda"``)
  and ran approximate instructions (``ex2.approx`` ...): then the floating
  outputs are compared within :data:`APPROX_ULPS` units in the last place
  of their dtype, and the report names the approximate instructions; and
  a GPU launch whose floating-point MMAs (``mma``, ``wgmma``) fed a
  floating output is compared within the sum-order bound of
  :func:`mma_accumulations` (the ISA leaves the order and precision of
  tensor-core sums open). The report names each buffer that matched within
  a bound, and the bound. An emulator capture is always compared byte for
  byte (the emulator is deterministic).
* Every replay reports the emulator's fidelity for the launch
  (:class:`jaxptx.sim.Fidelity`: which instructions ran exactly, which
  within the ISA's stated error, which by our reading of the ISA, and
  whether such a value reached an address, a branch or a barrier).
* ``check=True`` adds the sanitizer's verdict (every finding),
  ``profile=True`` the profile (:class:`jaxptx.profile.Profile`).

The command prints what differs (buffer, first index, both values, how many
elements) and exits 1 on a mismatch, 2 when the capture is refused
(truncated or edited: :class:`jaxptx.capture.CaptureError`) or cannot run,
0 when every buffer matches. ``--json`` prints :meth:`Replay.to_dict`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (bfloat16 / float8 names for numpy)
import numpy as np

from . import profile as _profile  # noqa: F401  (registers the emulator's profiler: profile=True)
from . import isa, sim
from .capture import Buffer, Capture, CaptureError, load
from .sim.capturing import place

__all__ = ["load", "run", "Replay", "Mismatch", "APPROX_ULPS", "main", "CaptureError"]

# The bound for a GPU launch that ran approximate instructions: units in the
# last place of the output's dtype, by element size (an f32 softmax's ex2 and
# rcp are within 2 ulp each in the ISA; a 16-bit output may round either way).
APPROX_ULPS = {8: 16, 4: 16, 2: 2, 1: 1}

_MMA_SHAPE = re.compile(r"\.m(\d+)n(\d+)k(\d+)\b")
_MMA_ISSUERS = {"wgmma": 128, "mma": 32, "wmma": 32}   # threads that issue one instruction together


def mma_accumulations(reading: dict[str, Any], elements: int) -> float | None:
    """How many floating-point MMA instructions accumulated into each of an
    output buffer's ``elements``, on average, from a launch's fidelity
    ``reading`` (spelling -> usage with thread counts): each one adds its
    products to the accumulator in an order and precision the PTX ISA leaves
    open. 0 when no such MMA ran; None when one ran whose spelling does not
    give its shape (``tcgen05.mma`` takes it from a descriptor)."""
    total = 0.0
    for name, usage in reading.items():
        if isa.FLOAT_MMA not in usage.notes:
            continue
        shape, issuers = _MMA_SHAPE.search(name), _MMA_ISSUERS.get(name.split(".")[0])
        if shape is None or issuers is None or elements <= 0:
            return None
        total += usage.count / issuers * int(shape[1]) * int(shape[2]) / elements
    return total


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """A buffer whose replayed bytes differ from the recorded ones.

    Attributes:
        buffer: its name (``"output 0"``).
        index: the first differing element (flat index; a byte offset when
            the dtype is unknown).
        recorded, replayed: the two values there.
        count: how many elements (bytes) differ (beyond the bound, if any).
        bound: the bound it was held to (``"bytes"``, or ``"16 ulp (f32)"``).
    """

    buffer: str
    index: int
    recorded: Any
    replayed: Any
    count: int
    bound: str

    def __str__(self) -> str:
        return (f"{self.buffer}: {self.count} element(s) differ ({self.bound}); first at index "
                f"{self.index}: recorded {self.recorded!r}, replayed {self.replayed!r}")


@dataclasses.dataclass
class Replay:
    """The result of :func:`run`.

    Attributes:
        capture: what was replayed.
        mismatches: one per buffer that differs (empty: reproduced).
        approximate: the approximate instructions the launch ran (the bound
            applies to GPU captures only).
        fidelity: the emulator's fidelity report for the launch.
        findings: the sanitizer's findings (``check=True``), else None.
        profile: the launch's profile (``profile=True``), else None.
        within: buffer name -> the bound it matched within, for each buffer
            whose bytes differ but stay within their bound.
    """

    capture: Capture
    mismatches: list[Mismatch]
    approximate: list[str]
    fidelity: Any
    findings: list | None = None
    profile: Any = None
    within: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every buffer matches the recorded one (within its bound)."""
        return not self.mismatches

    def report(self) -> str:
        """A human-readable account of the replay."""
        c = self.capture
        lines = [f"kernel {c.entry} ({c.source} capture, id {c.kernel_id}): grid {c.grid}, block "
                 f"{c.block}, cluster {c.cluster}, smem {c.smem}; {len(c.buffers)} buffer(s)"]
        if self.ok:
            lines.append("reproduced: every buffer matches byte for byte" if not self.within else
                         "reproduced: every buffer matches, byte for byte or within its bound:")
            lines += [f"  {name}: {bound}" for name, bound in self.within.items()]
        else:
            lines.append(f"MISMATCH in {len(self.mismatches)} buffer(s):")
            lines += [f"  {m}" for m in self.mismatches]
            if self.approximate:
                lines.append(f"  approximate instructions ran: {', '.join(self.approximate)}")
        if self.fidelity is not None:
            lines += self.fidelity.summary().splitlines()
        if self.findings is not None:
            lines.append("sanitizer: clean" if not self.findings else
                         f"sanitizer: {len(self.findings)} finding(s)")
            lines += [f"  {f.message}" for f in self.findings]
        if self.profile is not None:
            lines += ["profile:", str(self.profile)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``ok``, ``kernel``, ``source``, ``mismatches``,
        ``approximate``, ``fidelity``, ``findings``, ``profile``."""
        return {
            "ok": self.ok, "kernel": self.capture.entry, "source": self.capture.source,
            "kernel_id": self.capture.kernel_id,
            "mismatches": [{k: _plain(v) for k, v in dataclasses.asdict(m).items()}
                           for m in self.mismatches],
            "approximate": list(self.approximate), "within": dict(self.within),
            "fidelity": None if self.fidelity is None else self.fidelity.to_dict(),
            "findings": None if self.findings is None else [f.message for f in self.findings],
            "profile": None if self.profile is None else self.profile.to_dict(),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def run(capture: Capture | str | Path, *, check: bool = False, profile: bool = False) -> Replay:
    """Replay ``capture`` (a :class:`~jaxptx.capture.Capture` or a path) on
    the emulator and compare its memory with the recorded memory.

    Raises:
        CaptureError: a file that is truncated, edited or not a capture.
        jaxptx.sim.SimError: the launch cannot run on the emulator.
    """
    if not isinstance(capture, Capture):
        capture = load(capture)
    device = sim.Device(arch=capture.arch)
    addresses, params = place(device, capture)
    result = device.launch(capture.ptx, params, kernel=capture.entry, grid=capture.grid,
                           block=capture.block, cluster=capture.cluster, smem=capture.smem,
                           check="all" if check else False, profile=profile, fidelity=True)
    approximate = sorted(result.approximate)
    gpu = capture.source == "cuda"
    bounded = gpu and bool(approximate)
    mismatches: list[Mismatch] = []
    within: dict[str, str] = {}
    for buffer, address in zip(capture.buffers, addresses):
        replayed = device.read(address, len(buffer.after))
        dtype = _dtype(buffer.dtype)
        steps = mma_accumulations(result.reading, len(buffer.after) // dtype.itemsize) \
            if gpu and dtype is not None and dtype.kind == "f" else 0
        m, bound = _compare(buffer, replayed, bounded, steps or 0)
        if m is not None:
            mismatches.append(m)
        elif bound:
            within[buffer.name] = bound
    for name, _, after in capture.globals:
        replayed = device.read(device.global_address(capture.ptx, name, capture.entry), len(after))
        m, _ = _compare(Buffer(f"global {name}", b"", after), replayed, False)
        if m is not None:
            mismatches.append(m)
    return Replay(capture, mismatches, approximate, result,
                  findings=list(result.findings or []) if check else None,
                  profile=result.profile if profile else None, within=within)


def _compare(buffer: Buffer, replayed: bytes, bounded: bool,
             mma_steps: float = 0) -> tuple[Mismatch | None, str]:
    """The mismatch of ``replayed`` against the recorded bytes (None: none)
    and the bound it was held to ("" when the bytes are equal): byte for byte,
    within :data:`APPROX_ULPS` where ``bounded``, and, where ``mma_steps``
    tensor-core accumulations fed each element (a GPU capture), within
    ``(mma_steps + 1)`` epsilons of the buffer's largest magnitude: each
    accumulation may round (truncate) its partial sum, whose magnitude the
    largest output bounds for sums without cancellation."""
    if replayed == buffer.after:
        return None, ""
    dtype = _dtype(buffer.dtype)
    ours = np.frombuffer(replayed, np.uint8)
    theirs = np.frombuffer(buffer.after, np.uint8)
    if dtype is None or len(replayed) % dtype.itemsize:
        bad = np.flatnonzero(ours != theirs)
        return Mismatch(buffer.name, int(bad[0]), int(theirs[bad[0]]), int(ours[bad[0]]),
                        len(bad), "bytes"), "bytes"
    a, b = theirs.view(dtype), ours.view(dtype)
    if bounded and dtype.kind == "f":
        ulps = APPROX_ULPS.get(dtype.itemsize, 1)
        far = _beyond_ulps(a, b, dtype, ulps)
        bound = f"{ulps} ulp ({dtype.name})"
    else:
        far = None
    if mma_steps and dtype.kind == "f":
        x, y = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(x)
        largest = float(np.abs(x[finite]).max()) if finite.any() else 0.0
        tolerance = (mma_steps + 1) * float(np.finfo(dtype).eps) * largest
        with np.errstate(invalid="ignore"):
            beyond = ~(np.abs(x - y) <= tolerance) & ~((x == y) | (np.isnan(x) & np.isnan(y)))
        far = beyond if far is None else far & beyond
        bound = (f"tensor-core sum order: {mma_steps:.0f} accumulations per element, |difference| <= "
                 f"{tolerance:.3g} ({dtype.name})" + (f" or {bound}" if bounded else ""))
    if far is None:
        far = a.view(np.uint8).reshape(len(a), -1) != b.view(np.uint8).reshape(len(b), -1)
        far = far.any(axis=1)
        bound = "bytes"
    bad = np.flatnonzero(far)
    if not len(bad):
        return None, bound
    i = int(bad[0])
    return Mismatch(buffer.name, i, _plain(a[i]), _plain(b[i]), len(bad), bound), bound


def _beyond_ulps(a: np.ndarray, b: np.ndarray, dtype: np.dtype, ulps: int) -> np.ndarray:
    """Elements that differ by more than ``ulps`` units in the last place
    (of the larger magnitude), or where only one is NaN."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    nan = np.isnan(x) | np.isnan(y)
    both_nan = np.isnan(x) & np.isnan(y)
    scale = np.maximum(np.abs(x), np.abs(y))
    tiny = float(np.finfo(dtype).smallest_normal)
    ulp = np.maximum(scale, tiny) * float(np.finfo(dtype).eps)
    with np.errstate(invalid="ignore"):
        far = np.abs(x - y) > ulps * ulp
    far = np.where(nan, ~both_nan, far)
    same_inf = np.isinf(x) & (x == y)
    return far & ~same_inf


def _dtype(name: str | None) -> np.dtype | None:
    if not name:
        return None
    try:
        return np.dtype(name)
    except TypeError:
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxptx.replay FILE [--check] [--profile] [--json]``."""
    parser = argparse.ArgumentParser(prog="python -m jaxptx.replay",
                                     description="Replay a captured jaxptx launch on the emulator.")
    parser.add_argument("files", nargs="+", type=Path, help="capture files (.jxcap)")
    parser.add_argument("--check", action="store_true", help="run under the sanitizer")
    parser.add_argument("--profile", action="store_true", help="print the launch's profile")
    parser.add_argument("--json", action="store_true", help="print JSON, one object per file")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            replay = run(path, check=args.check, profile=args.profile)
        except CaptureError as e:
            _say(args.json, {"ok": False, "file": str(path), "error": str(e)}, f"refused: {e}")
            status = max(status, 2)
            continue
        except Exception as e:  # noqa: BLE001 - report, go on with the next file
            message = f"{type(e).__name__}: {e}"
            _say(args.json, {"ok": False, "file": str(path), "error": message},
                 f"{path}: cannot replay: {message}")
            status = max(status, 2)
            continue
        _say(args.json, {"file": str(path), **replay.to_dict()}, f"{path}\n{replay.report()}")
        if not replay.ok:
            status = max(status, 1)
    return status


def _say(as_json: bool, record: dict, text: str) -> None:
    print(json.dumps(record, sort_keys=True, default=str) if as_json else text)


if __name__ == "__main__":
    sys.exit(main())
