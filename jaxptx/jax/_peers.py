"""The ``peers`` attribute of a call of a kernel with peers, and what the
CPU handler decodes from it.

A call of a kernel declared with ``peers=`` (inside ``jax.shard_map``, as
``k(x, axis_name="d")``) lowers to the same custom call as any kernel on
each device, with its rank on the axis as one more operand (a u32 scalar,
``lax.axis_index``) and one more attribute, ``peers``, a dictionary:

* ``axis_name`` (string) and ``axis_size`` (int64): the mesh axis whose
  devices run the kernel together;
* ``buffers`` (int64 array): the peer tensors, as indices among the
  kernel's tensors (inputs, then outputs; the rank operand is not counted),
  in ``peers`` order: the rows of the peer table;
* ``multimem`` (int64): bit ``k`` set when the kernel takes the multicast
  address of peer tensor ``k`` (a GPU handler binds a multicast object
  only for those);
* ``site`` (int64): which of the program's calls of peer kernels this is,
  numbered in lowering order; the devices' calls that meet are those of
  one kernel id at one site.

Every device carries the same attributes (the program is SPMD): what
differs is its rank operand and its buffers. A GPU handler has what it needs
to exchange pointers from these: the axis size, which buffers, the rank.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..dsl import Kernel, Specialization

__all__ = ["PeerCall", "attribute", "site", "decode"]

# The key of the site counter in a lowering's ModuleContext.lowering_cache
# (a dict that lives exactly as long as one module's lowering).
_SITE_KEY = ("jaxptx", "peer call sites")


class PeerCall(NamedTuple):
    """The ``peers`` attribute as the CPU handler passes it on."""

    axis_name: str
    axis_size: int
    buffers: tuple[int, ...]
    multimem: int
    site: int


def attribute(kernel: Kernel, spec: Specialization, axis: tuple[str, int], site: int) -> dict[str, Any]:
    """The ``peers`` attribute of a call of ``kernel`` over mesh axis
    ``axis`` = ``(name, size)`` at ``site``."""
    rows = [kernel.tensors.index(name) for name in kernel.peers]
    mask = sum(1 << k for k, name in enumerate(kernel.peers) if name in spec.multimem)
    return dict(axis_name=axis[0], axis_size=np.int64(axis[1]), buffers=np.array(rows, np.int64),
                multimem=np.int64(mask), site=np.int64(site))


def site(ctx: Any) -> int:
    """The next peer call site of the module being lowered (0, 1, ...).

    Counted in the lowering's own cache, so lowering one program twice
    numbers its calls alike (the HLO, and a ``jax.export``, are
    deterministic)."""
    cache = getattr(ctx.module_context, "lowering_cache", None)
    if cache is None:       # another jax: every call site is 0 (calls of one kernel then meet in order)
        return 0
    n = cache.get(_SITE_KEY, 0)
    cache[_SITE_KEY] = n + 1
    return n


def decode(value: Any) -> PeerCall:
    """The handler's ``(axis_name, axis_size, buffers, multimem, site)``.

    Raises:
        ValueError: not five members of those kinds, or an axis size below 1.
    """
    try:
        axis, size, buffers, multimem, where = value
        call = PeerCall(str(axis), int(size), tuple(int(b) for b in buffers), int(multimem), int(where))
    except (TypeError, ValueError):
        raise ValueError(f"the peers attribute: expected (axis_name, axis_size, buffers, multimem, "
                         f"site), got {value!r:.200}") from None
    if call.axis_size < 1:
        raise ValueError(f"the peers attribute: axis {call.axis_name!r} has size {call.axis_size}")
    return call
