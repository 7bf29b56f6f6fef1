"""What a launch tells the tools that watch it: the emulator's events.

Semantics and the scheduler never call a tool by name. They emit events to
the launch's :class:`Observers` (``machine.observers``), and each tool — the
sanitizer, ``jaxptx.profile``'s counter, the fidelity tracker, the device's
store recorder — is an :class:`Observer` that overrides the events it
watches. An event nobody watches costs a call to a no-op (rare events) or
one ``is None`` test (the hot ones: steps, register reads and writes,
memory accesses, whose hooks the machine and the memory cache).

Events (arguments are numpy arrays of thread indices, byte offsets or
mbarrier words unless said otherwise):

=========================  ====================================================
event                      when
=========================  ====================================================
``before_step(pc, ts)``    the scheduler is about to run ``pc`` on threads ``ts``
``begin(pc, sim)``         an instruction starts on the threads its guard lets
                           through (``sim``: its semantics name)
``after(sim, step)``       its semantics finished (``step``: the
                           :class:`.step.Step`); async issues and completions
                           (``cp.async.commit_group``, ``wgmma.wait_group``,
                           ``tcgen05.commit`` …) are told here, by ``sim``
``read_register``          ``(name, ts)``: a register read by threads ``ts``
``write_register``         ``(name, ts)``: a register written
``ignore_reads(on)``       register reads until ``ignore_reads(False)`` are not
                           reads of the instruction (``wgmma`` with scale-d
                           false does not read D)
``access``                 ``(buf, off, ts, width, kind, values)``: a memory
                           access of ``width`` bytes at byte offsets ``off``
                           of buffer ``buf`` (one of the memory's arrays) by
                           ``ts``; ``kind`` is :data:`LOAD`, :data:`STORE`,
                           :data:`ATOMIC` or :data:`UPDATE`; ``values`` the
                           stored values (stores only, else ``None``)
``on_behalf_of(thread)``   shared-memory reads until ``on_behalf_of(None)`` are
                           thread ``thread``'s (an MMA issuer reading through
                           another CTA's window)
``copy_read``, ``copy_write``  ``(off, ts, width)``: the async proxy read or
                           wrote shared bytes ``off`` for issuing threads ``ts``
``barrier_arrive``         ``(ts, keys)``: ``bar.arrive`` (a release) at
                           barriers ``keys`` (CTA × 16 + barrier)
``barrier_complete``       ``(ts, keys)``: a CTA barrier released ``ts``
``aligned_barrier(ts)``    an ``.aligned`` barrier reached by ``ts`` (a tool that
                           listens reports a divergent warp; otherwise the
                           machine raises)
``everyone_synchronised()``  every live thread of the grid met at one barrier
``warp_sync``              ``(ts, gone=None, pcs=None)``: ``bar.warp.sync``
                           released ``ts`` (``gone``: lanes that had exited)
``cluster_complete(ts)``   a cluster barrier released ``ts``
``member_mask``            ``(step, waits=False)``: a ``.sync`` collective's
                           member mask, to check against the executing lanes
``fence(ts)``              a memory fence; ``proxy_fence(ts)``: ``fence.proxy.async``
``mbarrier_init(words)``   mbarriers initialised
``mbarrier_arrive``        ``(ts, words)``: arrivals (releases) on mbarriers
``mbarrier_acquire``       ``(ts, words)``: a wait that observed a completed phase
``mbarrier_phases``        ``(words, completed)``: phases completed per word
``cp_async_to_mbarrier``   ``(ts, words)``: ``cp.async.mbarrier.arrive``
``tma_signal``             ``(ts, words)``: a bulk copy's completion signalled
                           on its mbarrier
=========================  ====================================================

A tool subclasses :class:`Observer` and joins a launch with
``machine.observe(tool)`` before :meth:`Machine.run`; ``Device.launch``
does it for the tools a launch asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Observer", "Observers", "EVENTS", "HOT_EVENTS", "LOAD", "STORE", "ATOMIC", "UPDATE"]

LOAD, STORE, ATOMIC, UPDATE = "load", "store", "atomic", "update"
"""Kinds of memory access: a load; a store; an atomic read-modify-write;
another read-modify-write with rules of its own (mbarrier words, the async
proxy's shared-memory copies), which the sanitizer checks through its own
events."""

EVENTS = ("before_step", "begin", "after", "read_register", "write_register", "ignore_reads", "access",
          "on_behalf_of", "copy_read", "copy_write", "barrier_arrive", "barrier_complete", "aligned_barrier",
          "everyone_synchronised", "warp_sync", "cluster_complete", "member_mask", "fence", "proxy_fence",
          "mbarrier_init", "mbarrier_arrive", "mbarrier_acquire", "mbarrier_phases", "cp_async_to_mbarrier",
          "tma_signal")
"""Every event, in the order of the table above."""

HOT_EVENTS = ("before_step", "read_register", "write_register", "access")
"""Events on the emulator's hot paths: their emitters cache
:meth:`Observers.hook` (``None`` when nobody listens) instead of calling a no-op."""


class Observer:
    """A tool watching a launch: every event is a no-op here; a tool
    overrides the ones it watches (see the module's table for arguments)."""

    def before_step(self, pc: int, threads: Any) -> None:
        """The scheduler is about to run ``pc`` on ``threads``."""

    def begin(self, pc: int, sim: str | None) -> None:
        """An instruction starts on the threads its guard lets through."""

    def after(self, sim: str, step: Any) -> None:
        """The instruction's semantics finished."""

    def read_register(self, name: str, threads: Any) -> None:
        """Register ``name`` read by ``threads``."""

    def write_register(self, name: str, threads: Any) -> None:
        """Register ``name`` written by ``threads``."""

    def ignore_reads(self, on: bool) -> None:
        """Register reads until ``ignore_reads(False)`` are not the instruction's."""

    def access(self, buf: Any, off: Any, threads: Any, width: int, kind: str, values: Any = None) -> None:
        """A memory access (``kind``: :data:`LOAD`, :data:`STORE`, :data:`ATOMIC`, :data:`UPDATE`)."""

    def on_behalf_of(self, thread: int | None) -> None:
        """Shared-memory reads until ``on_behalf_of(None)`` are ``thread``'s."""

    def copy_read(self, offsets: Any, threads: Any, width: int) -> None:
        """The async proxy read shared bytes for issuing ``threads``."""

    def copy_write(self, offsets: Any, threads: Any, width: int) -> None:
        """The async proxy wrote shared bytes for issuing ``threads``."""

    def barrier_arrive(self, threads: Any, keys: Any) -> None:
        """``bar.arrive`` at barriers ``keys`` (CTA × 16 + barrier)."""

    def barrier_complete(self, threads: Any, keys: Any) -> None:
        """A CTA barrier released ``threads``."""

    def aligned_barrier(self, threads: Any) -> None:
        """An ``.aligned`` barrier reached by ``threads``."""

    def everyone_synchronised(self) -> None:
        """Every live thread of the grid met at one barrier."""

    def warp_sync(self, threads: Any, gone: Any = None, pcs: Any = None) -> None:
        """``bar.warp.sync`` released ``threads``."""

    def cluster_complete(self, threads: Any) -> None:
        """A cluster barrier released ``threads``."""

    def member_mask(self, step: Any, waits: bool = False) -> None:
        """A ``.sync`` collective's member mask, for the executing lanes."""

    def fence(self, threads: Any) -> None:
        """A memory fence by ``threads``."""

    def proxy_fence(self, threads: Any) -> None:
        """``fence.proxy.async`` by ``threads``."""

    def mbarrier_init(self, words: Any) -> None:
        """Mbarriers initialised."""

    def mbarrier_arrive(self, threads: Any, words: Any) -> None:
        """Arrivals on mbarriers."""

    def mbarrier_acquire(self, threads: Any, words: Any) -> None:
        """A wait observed a completed phase."""

    def mbarrier_phases(self, words: Any, completed: Any) -> None:
        """Phases completed per mbarrier word."""

    def cp_async_to_mbarrier(self, threads: Any, words: Any) -> None:
        """``cp.async.mbarrier.arrive``."""

    def tma_signal(self, threads: Any, words: Any) -> None:
        """A bulk copy's completion signalled on its mbarrier."""


def _ignore(*args: Any, **kwargs: Any) -> None:
    """An event nobody watches."""


def _fan_out(fns: list[Callable[..., None]]) -> Callable[..., None]:
    def emit(*args: Any, **kwargs: Any) -> None:
        for fn in fns:
            fn(*args, **kwargs)
    return emit


class Observers:
    """The observers of one launch. Each event is an attribute: calling it
    tells every observer that overrides the event, in the order they
    joined (a no-op when none does).

    Example:
        >>> class Steps(Observer):
        ...     def __init__(self): self.n = 0
        ...     def before_step(self, pc, threads): self.n += 1
        >>> hub = Observers()
        >>> hub.hook("before_step") is None
        True
        >>> counter = hub.add(Steps())
        >>> hub.before_step(0, [0, 1]); counter.n
        1
    """

    def __init__(self) -> None:
        self._members: list[Observer] = []
        # Shared and never written: an empty hub costs nothing to build; add() makes its own.
        self._hooks: dict[str, Callable[..., None] | None] = _NO_HOOKS

    def add(self, observer: Observer) -> Observer:
        """Join ``observer`` to the launch; returns it."""
        if not isinstance(observer, Observer):
            raise TypeError(f"a launch observer must be a jaxptx.sim Observer, got {type(observer).__name__}")
        self._members.append(observer)
        self._rebuild()
        return observer

    def hook(self, event: str) -> Callable[..., None] | None:
        """The callable that tells ``event``'s observers, or ``None`` when none listens."""
        return self._hooks[event]

    def listens(self, event: str) -> bool:
        """Whether any observer overrides ``event``."""
        return self._hooks[event] is not None

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def _rebuild(self) -> None:
        self._hooks = {}
        for event in EVENTS:
            base = getattr(Observer, event)
            fns = [getattr(o, event) for o in self._members if getattr(type(o), event) is not base]
            hook = None if not fns else fns[0] if len(fns) == 1 else _fan_out(fns)
            self._hooks[event] = hook
            setattr(self, event, _ignore if hook is None else hook)


_NO_HOOKS: dict[str, Callable[..., None] | None] = dict.fromkeys(EVENTS)
# An empty hub's events are these class attributes (no-ops), so building one sets none.
for _event in EVENTS:
    setattr(Observers, _event, staticmethod(_ignore))
