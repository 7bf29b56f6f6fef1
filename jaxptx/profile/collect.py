"""``with jaxptx.profile.profiling() as p:``: the profile of every emulator
launch made inside a block, however it was made.

    with jaxptx.profile.profiling() as p:
        y = jax.block_until_ready(jax.jit(jaxptx.kernels.rms_norm)(x, w))
    print(p)                      # one row per launch
    p.profiles[0].heatmap()       # each a jaxptx.profile.Profile

Every launch that runs on the emulator is counted: ``jax.jit`` and eager
calls on the CPU (the CPU handler launches through
:meth:`jaxptx.sim.Device.launch`), ``jaxptx.torch`` ops on CPU tensors,
:func:`jaxptx.sim.launch`, :meth:`jaxptx.sim.Device.launch` and
:func:`jaxptx.profile.profile` itself. Each launch's :class:`~.report.Profile`
is the one ``profile=True`` would have returned for it (the same counter,
run by the same code), and the launch returns to its caller what it would
have returned without the block: its outputs, its sanitizer findings (or
the ``SanitizerError`` raised under :func:`jaxptx.sim.checking`), its faults.

**Threads.** The blocks are process-wide, as :func:`jaxptx.sim.checking`
is: a launch in any thread, while a block is open, goes to every open
block. A context variable would not do: XLA may run a CPU custom call on a
thread of its own (one per device under ``shard_map``, or when it
dispatches asynchronously), where the user's context is not visible. So a
block also collects the launches of other threads that run meanwhile, and
nested blocks each collect every launch of the inner one. A launch is
profiled when a block is open as it starts and goes to the blocks open as
it ends: wait for the results inside the block
(``jax.block_until_ready``). With no block open, a launch pays one list
lookup.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from .. import ir
from ..sim import device as _device
from .report import Profile
from .table import _n

__all__ = ["Profiling", "profiling"]

_OPEN: list[Profiling] = []       # the open blocks, any thread, oldest first
_LOCK = threading.Lock()


class Profiling:
    """What a :func:`profiling` block collected.

    Attributes:
        profiles: one :class:`~.report.Profile` per launch, in the order the
            launches ended (``profile.name`` is the kernel's entry).
        modules: the module each launch ran (parsed PTX or a traced
            module), for :meth:`attach_resources`; ``modules[i]`` ran
            ``profiles[i]``.
    """

    def __init__(self) -> None:
        self.profiles: list[Profile] = []
        self.modules: list[ir.Module] = []

    def __len__(self) -> int:
        return len(self.profiles)

    def __iter__(self) -> Iterator[Profile]:
        return iter(list(self.profiles))

    def __getitem__(self, i: int) -> Profile:
        return self.profiles[i]

    def by_kernel(self) -> dict[str, list[Profile]]:
        """The profiles grouped by kernel name, kernels in the order of
        their first launch."""
        out: dict[str, list[Profile]] = {}
        for p in self.profiles:
            out.setdefault(p.name, []).append(p)
        return out

    def kernels(self) -> list[str]:
        """The kernels launched, each once, in the order of their first launch."""
        return list(self.by_kernel())

    def attach_resources(self, arch: str | None = None) -> None:
        """Run ptxas on each launched module and fill every profile's
        ``resources`` and ``occupancy`` (as :func:`jaxptx.profile.profile`
        does), for ``arch`` or each kernel's own target; each distinct
        module is compiled once. Where ptxas is missing or rejects the
        target, ``resources`` is ``{"error": message}``."""
        from ..emit import emit
        from .api import attach_resources
        texts: dict[int, str] = {}
        first: dict[tuple[str, str, str], Profile] = {}
        for p, module in zip(self.profiles, self.modules):
            target = arch or p.arch
            if id(module) not in texts:
                texts[id(module)] = emit(module)
            text = texts[id(module)]
            done = first.setdefault((text, target, p.name), p)
            if done is p:
                attach_resources(p, text, target, entry=p.name)
            else:                       # the same kernel again: ptxas's figures, this launch's occupancy
                p.resources = dict(done.resources or {})
                p.occupancy = None if "error" in p.resources else _occupancy(p, target)

    def to_dict(self) -> dict[str, Any]:
        """``{"launches": [each profile's to_dict()]}``."""
        return {"launches": [p.to_dict() for p in self.profiles]}

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``kwargs`` go to ``json.dumps``)."""
        return json.dumps({"launches": [json.loads(p.to_json()) for p in self.profiles]}, **kwargs)

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        return f"<Profiling: {len(self.profiles)} launches of {len(self.by_kernel())} kernels>"

    def _add(self, p: Profile, module: ir.Module) -> None:
        self.profiles.append(p)
        self.modules.append(module)


def _occupancy(p: Profile, arch: str) -> dict[str, Any]:
    """The occupancy of ``p``'s launch on ``arch`` with its ``resources``."""
    from .occupancy import limits_for, occupancy
    try:
        limits_for(arch)
    except KeyError:
        return {}
    r = p.resources or {}
    threads = p.launch["block"][0] * p.launch["block"][1] * p.launch["block"][2]
    return {arch: occupancy(arch, threads, r["registers"], r["shared_bytes"] + p.launch["dynamic_smem"])}


@contextlib.contextmanager
def profiling(*, resources: bool = False, arch: str | None = None) -> Iterator[Profiling]:
    """Profile every emulator launch made while the block is open.

    Args:
        resources: at the end of the block, run ptxas on every launched
            kernel for its registers, shared memory, spills and occupancy
            (:meth:`Profiling.attach_resources`).
        arch: the target for those (default: each kernel's own).

    Yields:
        The :class:`Profiling`, filled as the launches end.

    Example:
        >>> import jax, jax.numpy as jnp, jaxptx
        >>> x, w = jnp.ones((4, 256), jnp.float32), jnp.ones((256,), jnp.float32)
        >>> with jaxptx.profile.profiling() as p:
        ...     y = jax.block_until_ready(jax.jit(jaxptx.kernels.rms_norm)(x, w))
        >>> len(p.profiles), p.profiles[0].name.startswith("rms_norm")
        (1, True)
    """
    collected = Profiling()
    with _LOCK:
        _OPEN.append(collected)
        _device.PROFILING[0] = _deliver
    try:
        yield collected
    finally:
        with _LOCK:
            _OPEN.remove(collected)
            if not _OPEN:
                _device.PROFILING[0] = None
    if resources:
        collected.attach_resources(arch)


def _deliver(p: Profile, module: ir.Module) -> None:
    """The emulator's hook (:data:`jaxptx.sim.device.PROFILING`): give one
    launch's profile to every open block."""
    with _LOCK:
        for block in _OPEN:
            block._add(p, module)


def render(c: Profiling) -> str:
    """The table ``print(profiling)`` shows: one row per launch, then the
    total of the roofline estimates."""
    head = (f"{'#':>3}  {'kernel':<28} {'arch':<8} {'grid':<13} {'block':<13} {'warp instr':>10} "
            f"{'sect/req':>8} {'confl':>6} {'tensor FLOP':>11}  roofline estimate")
    out = [f"jaxptx.profile.profiling: {len(c.profiles)} launches", head]
    total = 0.0
    for i, p in enumerate(c.profiles):
        k, launch = p.kernel, p.launch
        est = p.roofline()
        total += est["time_lower_bound_s"]
        name = p.name if len(p.name) <= 28 else p.name[:25] + "..."
        out.append(f"{i:>3}  {name:<28} {p.arch:<8} {_shape(launch['grid']):<13} {_shape(launch['block']):<13} "
                   f"{_n(k['instructions']):>10} {k['sectors_per_request']:>8.2f} "
                   f"{_n(k['shared_bank_conflicts']):>6} {_n(sum(p.tensor_flops.values())):>11}  "
                   f">= {_time(est['time_lower_bound_s'])} on {est['gpu']} ({est['bound_by']})")
    if c.profiles:
        out.append(f"     sum of the estimates: >= {_time(total)} (each on its own target's GPU; "
                   "an estimate, never a measurement)")
    return "\n".join(out)


def _time(seconds: float) -> str:
    """``12.3 ns``, ``4.56 us`` or ``7.89 ms``."""
    for unit, scale in (("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds * 1e9:.1f} ns"


def _shape(xyz: Any) -> str:
    return "x".join(str(v) for v in xyz)
