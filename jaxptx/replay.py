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
  of their dtype, and the report names the approximate instructions. An
  emulator capture is always compared byte for byte (the emulator is
  deterministic).
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
import sys
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (bfloat16 / float8 names for numpy)
import numpy as np

from . import profile as _profile  # noqa: F401  (registers the emulator's profiler: profile=True)
from . import sim
from .capture import Buffer, Capture, CaptureError, load
from .sim.capturing import place

__all__ = ["load", "run", "Replay", "Mismatch", "APPROX_ULPS", "main", "CaptureError"]

# The bound for a GPU launch that ran approximate instructions: units in the
# last place of the output's dtype, by element size (an f32 softmax's ex2 and
# rcp are within 2 ulp each in the ISA; a 16-bit output may round either way).
APPROX_ULPS = {8: 16, 4: 16, 2: 2, 1: 1}


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
    """

    capture: Capture
    mismatches: list[Mismatch]
    approximate: list[str]
    fidelity: Any
    findings: list | None = None
    profile: Any = None

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
            how = "byte for byte" if not self._bounded else \
                f"within the approximate-math bound ({', '.join(self.approximate)})"
            lines.append(f"reproduced: every buffer matches {how}")
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

    @property
    def _bounded(self) -> bool:
        return self.capture.source == "cuda" and bool(self.approximate)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``ok``, ``kernel``, ``source``, ``mismatches``,
        ``approximate``, ``fidelity``, ``findings``, ``profile``."""
        return {
            "ok": self.ok, "kernel": self.capture.entry, "source": self.capture.source,
            "kernel_id": self.capture.kernel_id,
            "mismatches": [{k: _plain(v) for k, v in dataclasses.asdict(m).items()}
                           for m in self.mismatches],
            "approximate": list(self.approximate),
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
    bounded = capture.source == "cuda" and bool(approximate)
    mismatches = []
    for buffer, address in zip(capture.buffers, addresses):
        replayed = device.read(address, len(buffer.after))
        m = _compare(buffer, replayed, bounded)
        if m is not None:
            mismatches.append(m)
    for name, _, after in capture.globals:
        replayed = device.read(device.global_address(capture.ptx, name, capture.entry), len(after))
        m = _compare(Buffer(f"global {name}", b"", after), replayed, False)
        if m is not None:
            mismatches.append(m)
    return Replay(capture, mismatches, approximate, result,
                  findings=list(result.findings or []) if check else None,
                  profile=result.profile if profile else None)


def _compare(buffer: Buffer, replayed: bytes, bounded: bool) -> Mismatch | None:
    if replayed == buffer.after:
        return None
    dtype = _dtype(buffer.dtype)
    ours = np.frombuffer(replayed, np.uint8)
    theirs = np.frombuffer(buffer.after, np.uint8)
    if dtype is None or len(replayed) % dtype.itemsize:
        bad = np.flatnonzero(ours != theirs)
        return Mismatch(buffer.name, int(bad[0]), int(theirs[bad[0]]), int(ours[bad[0]]),
                        len(bad), "bytes")
    a, b = theirs.view(dtype), ours.view(dtype)
    if bounded and dtype.kind == "f":
        ulps = APPROX_ULPS.get(dtype.itemsize, 1)
        far = _beyond_ulps(a, b, dtype, ulps)
        bound = f"{ulps} ulp ({dtype.name})"
    else:
        far = a.view(np.uint8).reshape(len(a), -1) != b.view(np.uint8).reshape(len(b), -1)
        far = far.any(axis=1)
        bound = "bytes"
    bad = np.flatnonzero(far)
    if not len(bad):
        return None
    i = int(bad[0])
    return Mismatch(buffer.name, i, _plain(a[i]), _plain(b[i]), len(bad), bound)


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
