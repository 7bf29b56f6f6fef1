"""Kernels that name their peers: ``@kernel(peers=(...))``, ``ptx.rank()``,
``ptx.world_size()``, ``x.peer_ptr(r)`` and ``x.multimem_ptr``.

A kernel with ``peers`` is called inside ``jax.shard_map`` with an axis name;
every device of that axis runs it at once, and each may read and write the
peer tensors of every other. The body reaches them through two hidden entry
parameters the runtime fills for each device, declared after every other
parameter (the tensors' pointers, the raw params, the TMA descriptors):

* ``.param .u32 jaxptx_rank``: this device's index on the axis
  (``ptx.rank()``);
* ``.param .u64 jaxptx_peers``: the global address of the peer table, an
  array of u64 addresses: entry ``k * W + r`` is device ``r``'s copy of peer
  tensor ``k`` (``peers`` order, ``W`` the axis size), and entry
  ``K * W + k`` (``K`` peer tensors) the multicast address bound over every
  device's tensor ``k`` (0 where the kernel never asks for it).

The axis size is known when the kernel is traced (``ptx.world_size()`` is a
Python int): a specialisation is per axis size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .. import ir
from ..errors import SpecError, TraceError
from ._core import Reg, emit_instruction
from ._trace import Trace, current, user_location, with_location
from ._values import Addr

__all__ = ["Peers", "check_peers", "declare_hidden", "rank", "world_size", "peer_ptr",
           "multimem_ptr", "RANK_PARAM", "TABLE_PARAM", "RESERVED_KEYWORDS"]

RANK_PARAM = "jaxptx_rank"
TABLE_PARAM = "jaxptx_peers"
# Keywords a kernel with peers takes itself: ``k(x, axis_name=...)`` and
# ``k.ptx(world_size=...)``; no template parameter may use them.
RESERVED_KEYWORDS = ("axis_name", "world_size")


@dataclasses.dataclass
class Peers:
    """The peers of the kernel being traced.

    Attributes:
        names: the peer tensors, in ``peers`` order (their table rows).
        world: the axis size.
        multimem: the peer tensors whose multicast address the body took.
    """

    names: tuple[str, ...]
    world: int
    multimem: set[str] = dataclasses.field(default_factory=set)


def check_peers(peers: Any, tensors: Sequence[str], template: Sequence[str],
                where: str) -> tuple[str, ...]:
    """The ``peers`` option: distinct names of tensor parameters.

    Raises:
        SpecError: not a sequence of tensor parameter names, a name twice, or
            a template parameter named ``axis_name`` / ``world_size``.
    """
    if isinstance(peers, str):
        peers = (peers,)
    if not isinstance(peers, Sequence) or not all(isinstance(p, str) for p in peers):
        raise SpecError(f"{where} peers: expected a tuple of tensor parameter names, got {peers!r}")
    unknown = [p for p in peers if p not in tensors]
    if unknown:
        raise SpecError(f"{where} peers: {unknown} are not tensor parameters of the kernel "
                        f"(it has {list(tensors)})")
    if len(set(peers)) != len(peers):
        raise SpecError(f"{where} peers: each tensor once, got {list(peers)}")
    clash = [k for k in RESERVED_KEYWORDS if k in template]
    if peers and clash:
        raise SpecError(f"{where}: a kernel with peers takes the keywords {RESERVED_KEYWORDS} "
                        f"itself; rename the template parameter(s) {clash}")
    return tuple(peers)


def declare_hidden(trace: Trace) -> None:
    """Append the hidden parameters (rank, peer table) to the entry's
    parameter list: after the body ran, so after its TMA descriptors."""
    trace.params.append(ir.VarDecl("param", "u32", trace.new_symbol(RANK_PARAM)))
    trace.params.append(ir.VarDecl("param", "u64", trace.new_symbol(TABLE_PARAM)))


def _peers(what: str) -> tuple[Trace, Peers]:
    trace = current()
    peers = trace.cache.get("peers")
    if peers is None:
        err = TraceError(f"{what}: kernel {trace.name} declares no peers; declare the tensors "
                         f"other devices reach with @kernel(..., peers=('x',)) and call it "
                         f"inside jax.shard_map with axis_name=...")
        raise with_location(err, user_location())
    return trace, peers


def rank() -> Reg:
    """This device's index on the call's mesh axis (a ``u32`` register,
    loaded once at the kernel's start).

    Raises:
        TraceError: the kernel declares no peers.
    """
    trace, _ = _peers("ptx.rank()")
    return trace.materialise(("peer", "rank"),
                             lambda: emit_instruction("ld", ("param", "u32"), (RANK_PARAM,)))


def world_size() -> int:
    """The number of devices on the call's mesh axis (a Python int: the
    kernel is traced once per axis size).

    Raises:
        TraceError: the kernel declares no peers.
    """
    return _peers("ptx.world_size()")[1].world


def _table(trace: Trace) -> Reg:
    def load() -> Reg:
        raw = emit_instruction("ld", ("param", "u64"), (TABLE_PARAM,))
        return emit_instruction("cvta", ("to", "global", "u64"), (raw,))
    return trace.materialise(("peer", "table"), load)


def _row(peers: Peers, name: str, what: str) -> int:
    if name not in peers.names:
        err = TraceError(f"{what}: tensor {name} is not a peer tensor of the kernel; "
                         f"its peers are {list(peers.names)}")
        raise with_location(err, user_location())
    return peers.names.index(name)


def peer_ptr(name: str, r: Any) -> Reg:
    """The global address of device ``r``'s copy of peer tensor ``name``
    (a ``u64`` register); ``r`` is an int in ``0..world_size()-1`` or a
    32-bit integer register.

    Raises:
        TraceError: the kernel has no peers, ``name`` is not one, or ``r``
            is an int outside the axis.
    """
    what = f"{name}.peer_ptr({r!r})"
    trace, peers = _peers(what)
    k = _row(peers, name, what)
    table = _table(trace)
    if isinstance(r, bool) or not isinstance(r, (int, Reg)):
        err = TraceError(f"{what}: expected the device's rank as an int or a u32 register, "
                         f"got {type(r).__name__}")
        raise with_location(err, user_location())
    if isinstance(r, int):
        if not 0 <= r < peers.world:
            err = TraceError(f"{what}: rank {r} is outside the axis (0..{peers.world - 1})")
            raise with_location(err, user_location())
        entry = k * peers.world + r
        return trace.materialise(("peer", "ptr", name, r), lambda: emit_instruction(
            "ld", ("global", "u64"), (Addr(table, entry * 8),)))
    if r.type.bits != 32 or r.type.kind not in "usb":
        err = TraceError(f"{what}: expected a 32-bit integer register for the rank, got .{r.type.name}")
        raise with_location(err, user_location())
    index = emit_instruction("add", ("u32",), (r, k * peers.world)) if k else r
    offset = emit_instruction("mul", ("wide", "u32"), (index, 8))
    return emit_instruction("ld", ("global", "u64"), (Addr(table + offset),))


def multimem_ptr(name: str) -> Reg:
    """The multicast address bound over every device's copy of peer tensor
    ``name`` (a ``u64`` register for ``ptx.multimem.*``).

    Raises:
        TraceError: the kernel has no peers, or ``name`` is not one.
    """
    what = f"{name}.multimem_ptr"
    trace, peers = _peers(what)
    k = _row(peers, name, what)
    peers.multimem.add(name)
    table = _table(trace)
    entry = len(peers.names) * peers.world + k
    return trace.materialise(("peer", "multimem", name), lambda: emit_instruction(
        "ld", ("global", "u64"), (Addr(table, entry * 8),)))
