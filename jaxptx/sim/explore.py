"""Run one launch under many schedules and report what fails: :func:`explore`.

    >>> found = sim.explore(kernel_ptx, locks, out, block=64, seeds=100)
    >>> found.failures            # [(seed, the error or the findings), ...]
    >>> found.outputs_differ      # seeds whose outputs differ from the default schedule's
    >>> print(found.replay(29))   # the call that reproduces seed 29

Each seed is a :class:`jaxptx.sim.core.schedules.RandomSchedule`: another
interleaving of the warps, reproduced bit for bit by its seed. A kernel
whose outputs change with the schedule has a race even when no checker
fires, so outputs are compared with the default schedule's run as well.
With ``workers`` > 1 the seeds run in that many processes (PTX text or a
parsed module only: a traced kernel object does not cross processes).

From the command line, a capture (``JAXPTX_CAPTURE_DIR``, :mod:`jaxptx.capture`:
the launch's PTX, parameters and memory) is explored the same way::

    python -m jaxptx.sim.explore launch.jxcap [--seeds 100] [--check]

It prints each failing seed with the command that replays it, and exits 1
when a seed failed or changed the outputs, 0 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import multiprocessing
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import capture
from .capturing import place
from .device import Device
from .errors import SimError, SimLaunchError
from .launch import launch as _launch
from .precheck import PrecheckError

__all__ = ["Exploration", "explore", "explore_capture", "main"]

# Errors that say the launch itself is wrong (the same under every schedule):
# explore raises them at once instead of reporting them per seed.
_BAD_LAUNCH = (PrecheckError, SimLaunchError, TypeError, ValueError)


@dataclasses.dataclass
class Exploration:
    """What :func:`explore` found.

    Attributes:
        seeds: the seeds run.
        failures: ``(seed, error)`` of each seed whose launch raised (a
            fault, a deadlock, a sanitizer error) or, with ``check="all"``,
            ``(seed, findings)``; ``seed`` is ``None`` for the default schedule.
        outputs_differ: seeds that ran to the end with outputs other than the
            default schedule's (a race no checker saw).
        call: how the launch was made, for :meth:`replay`.
        command: for a capture, the command that replays a seed (the seed
            follows it); empty otherwise.
    """

    seeds: tuple[int, ...]
    failures: list[tuple[int | None, Any]]
    outputs_differ: list[int]
    call: str
    command: str = ""

    @property
    def ok(self) -> bool:
        """No seed failed and every output matched the default schedule's."""
        return not self.failures and not self.outputs_differ

    def replay(self, seed: int) -> str:
        """The call that reproduces ``seed`` (and, for a kernel called under
        ``jax.jit``, the environment variable that does)."""
        if self.command:
            return f"{self.command} {seed}"
        return (f"{self.call}, schedule='random', seed={seed})    "
                f"# under jax.jit: JAXPTX_SIM_SCHEDULE=random:{seed}")

    def __str__(self) -> str:
        lines = [f"explored {len(self.seeds)} schedules: {len(self.failures)} failed, "
                 f"{len(self.outputs_differ)} with outputs that differ from the default schedule's"]
        for seed, error in self.failures[:8]:
            what = str(error).splitlines()[0] if not isinstance(error, list) else f"{len(error)} findings"
            lines.append(f"  seed {seed}: {what}")
            if seed is not None:
                lines.append(f"    replay: {self.replay(seed)}")
        for seed in self.outputs_differ[:8]:
            lines.append(f"  seed {seed}: outputs differ; replay: {self.replay(seed)}")
        return "\n".join(lines)


def explore(source: Any, *arrays: Any, seeds: int | Iterable[int] = 100, workers: int = 1,
            **launch: Any) -> Exploration:
    """Run ``sim.launch(source, *arrays, **launch)`` under the default
    schedule and under ``schedule="random"`` with each seed, on fresh copies
    of ``arrays`` (the caller's arrays are not changed).

    Args:
        source, arrays, launch: as :func:`jaxptx.sim.launch` takes them
            (``check=`` included; not ``schedule``/``seed``).
        seeds: how many (``range(seeds)``) or which seeds.
        workers: processes to run the seeds in (1: this process).

    Returns:
        An :class:`Exploration`.

    Raises:
        SimError: a launch that is wrong under every schedule (bad
            arguments, PTX the emulator refuses), raised by the default run;
            ``schedule``/``seed`` among ``launch``.
    """
    if "schedule" in launch or "seed" in launch:
        raise SimError("explore: it chooses the schedules itself; pass seeds=, not schedule= or seed=")
    chosen = _seeds(seeds)
    if not isinstance(workers, int) or workers < 1:
        raise SimError(f"explore workers: expected an int >= 1, got {workers!r}")
    reference = _run(source, arrays, launch, None)
    if workers > 1 and len(chosen) > 1:
        results = _in_processes(source, arrays, launch, chosen, workers)
    else:
        results = [_run(source, arrays, launch, seed) for seed in chosen]
    return _tally(chosen, reference, results, _call_text(source, arrays, launch))


def _seeds(seeds: int | Iterable[int]) -> tuple[int, ...]:
    """``range(seeds)`` for an int, else the seeds given."""
    return tuple(range(seeds)) if isinstance(seeds, int) else tuple(int(s) for s in seeds)


def _tally(chosen: tuple[int, ...], reference: tuple[Any, str], results: Sequence[tuple[Any, str]], call: str,
           command: str = "") -> Exploration:
    """The :class:`Exploration` of the default run's ``reference`` outcome and each seed's."""
    failures: list[tuple[int | None, Any]] = [(None, reference[0])] if reference[0] is not None else []
    differ = []
    for seed, (error, digest) in zip(chosen, results):
        if error is not None:
            failures.append((seed, error))
        elif reference[0] is None and digest != reference[1]:
            differ.append(seed)
    return Exploration(chosen, failures, differ, call, command)


def _outcome(launch: Callable[[dict], Any], outputs: Callable[[], Iterable[bytes]],
             seed: int | None) -> tuple[Any, str]:
    """``(error or findings or None, digest of the outputs)`` of ``launch(schedule
    keywords)`` under ``seed`` (None: the default schedule); a launch wrong
    under every schedule raises."""
    try:
        result = launch({} if seed is None else {"schedule": "random", "seed": seed})
    except _BAD_LAUNCH:
        raise
    except SimError as e:
        return e.with_traceback(None), ""    # the frames hold the launch's machine: let it go
    if isinstance(result, list) and result:            # check="all": the findings
        return result, ""
    h = hashlib.sha256()
    for data in outputs():
        h.update(data)
    return None, h.hexdigest()


def _run(source: Any, arrays: Sequence[Any], launch: dict, seed: int | None) -> tuple[Any, str]:
    """:func:`_outcome` of ``sim.launch`` on fresh copies of ``arrays``."""
    copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in arrays]
    return _outcome(lambda schedule: _launch(source, *copies, **launch, **schedule),
                    lambda: (np.ascontiguousarray(a).view(np.uint8).tobytes()
                             for a in copies if isinstance(a, np.ndarray)), seed)


def _run_seeds(source: Any, arrays: Sequence[Any], launch: dict, seeds: Sequence[int]) -> list[tuple[Any, str]]:
    """:func:`_run` for each seed (a worker process's share)."""
    return [_run(source, arrays, launch, seed) for seed in seeds]


def _in_processes(source: Any, arrays: Sequence[Any], launch: dict, seeds: tuple[int, ...],
                  workers: int) -> list[tuple[Any, str]]:
    """The seeds' results, run in ``workers`` spawned processes."""
    if not isinstance(source, str) and type(source).__module__.startswith("jaxptx.dsl"):
        raise SimError("explore workers > 1: a traced kernel cannot be sent to another process; pass its PTX "
                       "text (kernel.ptx()) or run with workers=1")
    chunks = [seeds[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        done = list(pool.map(_run_seeds, *zip(*[(source, arrays, launch, c) for c in chunks])))
    by_seed = {seed: r for chunk, results in zip(chunks, done) for seed, r in zip(chunk, results)}
    return [by_seed[s] for s in seeds]


def _call_text(source: Any, arrays: Sequence[Any], launch: dict) -> str:
    """``jaxptx.sim.launch(<kernel>, <arrays>, grid=..., ...`` (unclosed)."""
    name = getattr(source, "name", None) or ("<PTX text>" if isinstance(source, str) else "<module>")
    args = ", ".join(f"<{a.dtype}{list(a.shape)}>" if isinstance(a, np.ndarray) else repr(a) for a in arrays)
    options = "".join(f", {k}={v!r}" for k, v in launch.items())
    return f"jaxptx.sim.launch({name}, {args}{options}"


def explore_capture(saved: capture.Capture | str, seeds: int | Iterable[int] = 100,
                    check: bool = False, command: str = "") -> Exploration:
    """:func:`explore` for a captured launch: each run places the capture's
    memory on a fresh :class:`jaxptx.sim.Device` and launches its kernel
    with its parameters (``check``: under the sanitizer, every finding;
    ``command``: what replays one seed, for the report).

    Raises:
        CaptureError: a file that is not an intact capture.
        SimError: a launch wrong under every schedule.
    """
    if not isinstance(saved, capture.Capture):
        saved = capture.load(saved)

    def run(seed: int | None) -> tuple[Any, str]:
        device = Device(arch=saved.arch)
        addresses, params = place(device, saved)
        return _outcome(lambda schedule: device.launch(saved.ptx, params, kernel=saved.entry, grid=saved.grid,
                                                       block=saved.block, cluster=saved.cluster, smem=saved.smem,
                                                       check="all" if check else False, **schedule),
                        lambda: (device.read(a, len(b.before)) for b, a in zip(saved.buffers, addresses)), seed)
    chosen = _seeds(seeds)
    return _tally(chosen, run(None), [run(seed) for seed in chosen], f"capture of {saved.entry}", command)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxptx.sim.explore FILE``: explore a captured launch."""
    ap = argparse.ArgumentParser(prog="python -m jaxptx.sim.explore", description=__doc__.splitlines()[0])
    ap.add_argument("capture", help="a .jxcap file (JAXPTX_CAPTURE_DIR)")
    ap.add_argument("--seeds", type=int, default=100, help="how many seeds (0..N-1)")
    ap.add_argument("--seed", type=int, action="append", help="run these seeds only (repeatable)")
    ap.add_argument("--check", action="store_true", help="run under the sanitizer (every finding)")
    args = ap.parse_args(argv)
    try:
        found = explore_capture(args.capture, args.seed if args.seed else args.seeds, check=args.check,
                                command=f"python -m jaxptx.sim.explore {args.capture}"
                                        f"{' --check' if args.check else ''} --seed")
    except (capture.CaptureError, SimError, OSError) as e:
        print(f"explore: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(found)
    return 0 if found.ok else 1


if __name__ == "__main__":
    sys.exit(main())
