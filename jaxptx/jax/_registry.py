"""Kernel ids: what a lowered custom call names, and what its handler runs.

A lowering registers its specialisation here and puts the id in the HLO as
the ``kernel_id`` attribute. The id is derived from the call's content: the
first 48 bits of the SHA-256 of its PTX, entry and launch (the ``launch``
attribute's grid, block, cluster and dynamic shared memory, each buffer's
byte size, the TMA descriptor records) in the canonical byte form of ``ffi/call_identity.h``. Both
handlers recompute it from the attributes a call carries and refuse a call
whose content does not match, so neither an edited export nor new PTX under
a known id ever runs as another kernel's code; and the id is the same in
every process and in every order of lowering (an executable loaded from
JAX's persistent compilation cache names the same code). Ids stay below
2**48, clear of the 2**63 that typed-FFI int64 attributes allow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import isa
from ..dsl import PEER_RANK_PARAM, PEER_TABLE_PARAM, Kernel, Specialization
from ..errors import SpecError
from ..launch import Launch, launch_integers
from ._tma import records as tma_records

__all__ = ["Entry", "register", "add", "find", "lookup", "kernels_in", "content_bytes",
           "content_id"]

ID_BITS = 48

# (shape, numpy dtype) of one buffer.
BufferType = tuple[tuple[int, ...], np.dtype]


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """One registered launch.

    Attributes:
        kernel_id: the id in the HLO.
        kernel: the kernel; spec: its specialisation (PTX, IR module).
        entry: the ``.entry`` name; launch: the launch (the
            specialisation's, with the call's grid: a vmap folded into grid z
            changes it).
        inputs, outputs: ``(shape, numpy dtype)`` of each buffer.
    """

    kernel_id: int
    kernel: Kernel
    spec: Specialization
    entry: str
    launch: Launch
    inputs: tuple[BufferType, ...]
    outputs: tuple[BufferType, ...]

    def content(self) -> bytes:
        """What the id hashes: everything that decides what a launch does
        (:func:`content_bytes` of its PTX, entry and launch integers)."""
        return content_bytes(self.spec.ptx.encode(), self.entry, self.launch_integers())

    def launch_integers(self) -> list[int]:
        """The launch in the canonical order the handlers hash it."""
        tma = tma_records(self.spec.tma, self.kernel.name, self.inputs + self.outputs)
        return launch_integers(self.launch, [_nbytes(t) for t in self.inputs],
                               [_nbytes(t) for t in self.outputs], [int(v) for v in tma])


CONTENT_TAG = b"jaxptx-kernel-v1\n"


def content_bytes(ptx: bytes, entry: str, launch: Sequence[int]) -> bytes:
    """The canonical bytes of a call's content (ffi/call_identity.h)."""
    name = entry.encode()
    return (CONTENT_TAG + len(ptx).to_bytes(8, "little") + ptx + len(name).to_bytes(8, "little")
            + name + np.array(launch, dtype="<i8").tobytes())


def content_id(content: bytes) -> int:
    """The kernel id of content bytes: the first 48 bits of their SHA-256."""
    digest = hashlib.sha256(content).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - ID_BITS)


def _nbytes(buffer: BufferType) -> int:
    shape, dtype = buffer
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


_LOCK = threading.Lock()
_ENTRIES: dict[int, Entry] = {}


def register(kernel: Kernel, target: isa.Target, template: tuple, dims: tuple,
             launch: Launch, inputs: Sequence[BufferType],
             outputs: Sequence[BufferType], shared: Sequence[str] = (),
             world: int | None = None) -> Entry:
    """Specialise ``kernel`` for ``target`` and register the launch; return its entry.

    ``launch`` is the call's (the primitive's parameter); but for its grid it
    must be the specialisation's, which was validated for ``target``.
    ``shared`` names the inputs a batched launch shares across its batch;
    ``world`` is the mesh axis size of a call of a kernel with peers, whose
    last input is its rank (a scalar operand, not a pointer parameter).

    Raises:
        SpecError: the kernel's parameters are not one pointer per tensor,
            then its raw scalar params, then its TMA descriptors; or the
            call's launch is not the specialisation's.
    """
    peers = {"world_size": world} if kernel.peers else {}
    spec = kernel.specialize_for(target, shared=shared, **dict(template), **dict(dims), **peers)
    entry_fn = _entry_function(kernel, spec, len(inputs) + len(outputs) - bool(peers))
    if launch != dataclasses.replace(spec.launch, grid=launch.grid):
        raise SpecError(f"kernel {kernel.name}: the call launches {launch}, but its "
                        f"{target.name} specialisation launches {spec.launch}")
    return add(Entry(0, kernel, spec, entry_fn, launch, tuple(inputs), tuple(outputs)))


def add(entry: Entry) -> Entry:
    """Register ``entry`` under the id of its content (its own ``kernel_id``
    is ignored); return the entry registered under that id (an earlier one
    with the same content, or this one with its id). ``jaxptx.jax.ptx_call``
    registers raw PTX this way; ``entry.kernel`` needs only a ``name``.

    Raises:
        SpecError: another content already has the id.
    """
    content = entry.content()
    kernel_id = content_id(content)
    entry = dataclasses.replace(entry, kernel_id=kernel_id)
    with _LOCK:
        old = _ENTRIES.setdefault(kernel_id, entry)
    if old is not entry and old.content() != content:
        raise SpecError(f"kernel {entry.kernel.name}: kernel id {kernel_id} collides with kernel "
                        f"{old.kernel.name}; change either kernel slightly")
    return old


def find(kernel_id: int) -> Entry | None:
    """The entry registered under ``kernel_id`` in this process, or None."""
    return _ENTRIES.get(kernel_id)


def lookup(kernel_id: int) -> Entry:
    """The entry registered under ``kernel_id``.

    Raises:
        KeyError: nothing is registered under it in this process.
    """
    entry = _ENTRIES.get(kernel_id)
    if entry is None:
        raise KeyError(f"kernel id {kernel_id} is not registered in this process; kernels "
                       "register when a function calling them is lowered here")
    return entry


_KERNEL_ID = re.compile(r'@"?jaxptx_(?:cpu|launch)_v\d+\b[^\n]*?kernel_id\s*=\s*(\d+)')


def kernels_in(lowered: Any) -> dict[int, Specialization]:
    """``{kernel_id: Specialization}`` for each jaxptx custom call in a
    lowered function (a ``jax.stages.Lowered`` or its StableHLO text).

    Raises:
        TypeError: ``lowered`` is neither, or is text that is not StableHLO.
        KeyError: a call's kernel was not lowered in this process.
    """
    if isinstance(lowered, str):
        text = lowered
    elif callable(getattr(lowered, "as_text", None)) and hasattr(lowered, "compile"):
        text = lowered.as_text()
    else:
        raise TypeError(f"kernels_in: expected a jax.stages.Lowered (jax.jit(f).lower(...)) or "
                        f"its StableHLO text (.as_text()), got {type(lowered).__name__} "
                        f"{_shown(lowered)}")
    if not _STABLEHLO.search(text):
        raise TypeError(f"kernels_in: expected StableHLO text (a module with func.func, as "
                        f"jax.jit(f).lower(...).as_text() gives), got the str {_shown(text)}")
    return {int(k): lookup(int(k)).spec for k in dict.fromkeys(_KERNEL_ID.findall(text))}


_STABLEHLO = re.compile(r"\bmodule\b.*\bfunc\.func\b", re.DOTALL)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def buffer_type(aval: Any) -> BufferType:
    """``(shape, numpy dtype)`` of an abstract value."""
    return tuple(int(d) for d in aval.shape), np.dtype(aval.dtype)


def _entry_function(kernel: Kernel, spec: Specialization, buffers: int) -> str:
    entries = [f for f in spec.module.functions if f.kind == "entry"]
    if len(entries) != 1:
        raise SpecError(f"kernel {kernel.name}: a JAX call needs a module with one .entry, "
                        f"got {[f.name for f in entries]}")
    params = entries[0].params
    want = ([("u64", None)] * buffers + [(t.name, n) for t, n in kernel.raw_params]
            + [("b8", d.param) for d in spec.tma])
    if kernel.peers:
        want += [("u32", PEER_RANK_PARAM), ("u64", PEER_TABLE_PARAM)]
    got = [(p.type, p.name) for p in params]
    if len(got) != len(want) or any(w[0] != g[0] or w[1] not in (None, g[1]) for w, g in zip(want, got)):
        declared = ", ".join(f".{p.type} {p.name}" for p in params) or "none"
        raise SpecError(f"kernel {kernel.name}: a JAX call passes {buffers} buffer pointers "
                        f"(inputs then outputs), the raw params "
                        f"({', '.join(n for _, n in kernel.raw_params) or 'none'}), then the TMA "
                        f"descriptors ({', '.join(d.param for d in spec.tma) or 'none'}), but the "
                        f"entry's parameters are {declared}")
    return entries[0].name
