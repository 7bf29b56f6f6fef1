"""The CPU handler's Python half: run a kernel on the emulator.

The shim's ``jaxptx_cpu_v2`` handler (:data:`LABEL`) decodes and validates
the call's ``launch`` attribute and checks the call against its kernel id
(the id is derived from the call's PTX, entry and launch; ffi/
call_identity.h), then takes the GIL and calls :func:`run` with memoryviews
over XLA's buffers, the call's PTX, its launch and the buffers' dtypes and
shapes, all valid only during the call. The kernel runs from the call's own PTX (parsed
once per id), so an emulator fault names its PTX line; for a kernel lowered
in this process the message adds the kernel's Python line.

* **Inputs** are copied onto the emulated device: XLA's inputs never change.
  An output that is the same buffer as an input (an in-place output,
  ``input_output_aliases``) is one device buffer for both parameters.
* **Unwritten outputs.** Outputs start filled with a sentinel byte (on a
  GPU they hold garbage, so an atomic into an output the kernel never
  initialised gives garbage here too); bytes no store, copy or atomic of
  the launch wrote are an :class:`UnwrittenOutputError` naming the output
  and its first unwritten index (:mod:`jaxptx.sim.unwritten`, shared with
  ``sim.launch`` and ``jaxptx.profile``). Outputs a kernel may leave partly
  unwritten (:func:`jaxptx.jax.allow_unwritten`) start zero-filled and are
  not checked.
* **Faults** come back as the emulator reports them everywhere
  (:mod:`jaxptx.sim.faults`): kernel, access, buffer, CTA and thread, PTX
  line and text, and the kernel's Python line.
* **Sanitizer.** ``with jaxptx.sim.checking():`` (or ``JAXPTX_SIM_CHECK=1``,
  ``strict`` or ``all``) runs every launch under the emulator's sanitizer;
  findings are raised as ``SanitizerError`` naming the kernel.
* **Peers.** A call of a kernel with peers carries a ``peers`` attribute and
  its rank as a last input; its shards meet and run together on one
  emulated node (:mod:`._peer_cpu`); a capture records no such launch.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import ml_dtypes  # noqa: F401  (registers bfloat16 and float8 with numpy)
import numpy as np

from .. import capture, ir, sim
from ..launch import Launch
from ..parse import parse
from ..sim.faults import Fault, python_line
from ..dsl import Kernel, declarations
from ..sim.core.progress import environ_value
from ..sim.unwritten import UnwrittenOutputError, message as unwritten_message, unwritten
from ..types import TYPES
from . import _peer_cpu, _peers, _registry, _tma

__all__ = ["run", "UnwrittenOutputError", "LABEL"]

# The CPU handler's FFI target name (versioned: ffi/handlers.h).
LABEL = "jaxptx_cpu_v2"

# XLA may run several custom calls at once (one per device under
# shard_map); the emulator's caches are shared, so launches take turns.
_LAUNCH_LOCK = threading.Lock()
# Kernel id -> (PTX, module parsed from it). The shim has checked that a
# call's PTX is its id's; the text is kept so that a direct call of run()
# with other PTX under the same id never gets this module.
_PARSED: dict[int, tuple[bytes, ir.Module]] = {}
# The byte an output starts with: garbage a kernel may not read as zeros.
SENTINEL = 0xA5

# How emulator errors cite a PTX line: "[PTX line N]" (faults) or "at PTX
# line N (opcode)" (sanitizer findings).
_PTX_LINE = re.compile(r"\[?PTX line (\d+)\]?")


BufferType = tuple[str, tuple[int, ...]]


def run(kernel_id: int, inputs: Sequence[memoryview], outputs: Sequence[memoryview],
        ptx: memoryview, entry: str, launch: Launch | tuple, scalars: Sequence[int] = (),
        tma: Sequence[int] = (), input_types: Sequence[BufferType] = (),
        output_types: Sequence[BufferType] = (), allow_unwritten: int = 0,
        peers: Any = None) -> str | None:
    """Run kernel ``kernel_id``; return None, or the error for XLA to raise.

    ``launch`` is the call's launch attribute as the handler decoded it,
    ``(grid, block, cluster, smem)``, or a :class:`~jaxptx.launch.Launch`;
    ``scalars`` holds a ``(bytes, bits)`` pair per raw scalar param; ``tma``
    the call's TMA descriptor records (``_tma``), which the emulator encodes
    with the addresses it gives the buffers; ``input_types`` and
    ``output_types`` a ``(numpy dtype name, shape)`` pair per buffer (for
    messages); bit j of ``allow_unwritten`` lets output j keep unwritten bytes;
    ``peers`` is the ``peers`` attribute of a call of a kernel with peers
    (``_peers.decode``), whose last input is its rank: the shard then runs
    together with the other devices of the axis (``_peer_cpu``).

    Never raises: every failure (buffer size mismatch, unparsable PTX, an
    emulator fault, an unwritten output) comes back as the message of an
    FFI error, starting with the original error class's name.
    """
    try:
        registered = _registry.find(kernel_id)
        if peers is None:
            call = _call(kernel_id, registered, inputs, outputs, ptx, entry, launch, scalars, tma)
            capturing = bool(environ_value(capture.ENV_DIR)) and capture.directory() is not None
            ran = _run_staged(call, inputs, outputs, output_types, allow_unwritten, capturing)
            if capturing:
                _record(kernel_id, bytes(ptx).decode(), _Launch(call.module, entry, call.shape, call.values,
                                                                 call.maps), ran, len(inputs), tma,
                        [*input_types, *output_types])
            return None
        shape = launch if isinstance(launch, Launch) else Launch.from_attributes(*launch)
        if registered is not None:
            _check_sizes(registered, inputs, outputs)
        name = registered.kernel.name if registered is not None else entry
        peer_call = _peers.decode(peers)
        rank, group, inputs, input_types = _peer_cpu.split_rank(peer_call, inputs, input_types)
        module = _parsed(kernel_id, bytes(ptx))
        values = _scalar_values(_entry_function(module, entry), len(inputs) + len(outputs), scalars)
        peer = _peer_cpu.PeerLaunch(module, entry, shape, values, _tma.sim_maps(tma), peer_call, rank,
                                    kernel_id, name, _LAUNCH_LOCK, group)
        _run_checked(peer, inputs, outputs, output_types, allow_unwritten, name,
                     _output_names(registered, len(outputs)))
        return None
    except BaseException as e:  # noqa: BLE001 - every failure becomes an FFI error
        return _message(e, kernel_id, entry, registered=_registry.find(kernel_id),
                        ptx=bytes(ptx).decode(errors="replace"))


class _Call(NamedTuple):
    """What every call of one kernel with one signature (its launch, raw
    scalars, TMA records and buffer sizes) shares: all :func:`run` derives
    before the launch, worked out and checked once (:func:`_call`)."""

    ptx: bytes
    registered: _registry.Entry | None
    module: ir.Module
    entry: str
    shape: Launch
    values: list[bytes]
    maps: tuple
    name: str
    names: list[str | None]
    layout: "_Layout | None"
    staged: list


# (kernel id, entry, launch, scalars, tma, input sizes, output sizes) -> its
# _Call; at most _CALLS_KEPT, the oldest dropped first.
_CALLS: "collections.OrderedDict[tuple, _Call]" = collections.OrderedDict()
_CALLS_KEPT = 64


def _call(kernel_id: int, registered: _registry.Entry | None, inputs: Sequence[memoryview],
          outputs: Sequence[memoryview], ptx: memoryview, entry: str, launch: Launch | tuple,
          scalars: Sequence[int], tma: Sequence[int]) -> _Call:
    """The :class:`_Call` of a call: found again when the kernel was called
    before with the same signature, the same PTX and the same registry entry;
    else checked (buffer sizes against the kernel, the launch against its
    limits, the raw scalars against the entry's parameters) and kept.

    Raises:
        ValueError, LaunchError, ParseError: as the checks find.
    """
    key = (kernel_id, entry, launch if isinstance(launch, Launch) else tuple(launch), tuple(scalars),
           tuple(tma), tuple(mv.nbytes for mv in inputs), tuple(mv.nbytes for mv in outputs))
    try:
        hit = _CALLS.get(key)
    except TypeError:           # a direct call with lists for tuples: checked, not kept
        hit, key = None, None
    if hit is not None and hit.registered is registered and hit.ptx == ptx:
        return hit
    shape = launch if isinstance(launch, Launch) else Launch.from_attributes(*launch)
    if registered is not None:
        _check_sizes(registered, inputs, outputs)
    text = bytes(ptx)
    module = _parsed(kernel_id, text)
    values = _scalar_values(_entry_function(module, entry), len(inputs) + len(outputs), scalars)
    name = registered.kernel.name if registered is not None else entry
    # A traced kernel's layout is declared; any other call's is found from its buffers each call.
    layout = (_declared_layout(registered, len(inputs), len(outputs))
              if registered is not None and isinstance(registered.kernel, Kernel) else None)
    made = _Call(text, registered, module, entry, shape, values, _tma.sim_maps(tma), name,
                 _output_names(registered, len(outputs)), layout, [None])
    if key is not None:
        _CALLS[key] = made
        _CALLS.move_to_end(key)
        if len(_CALLS) > _CALLS_KEPT:
            _CALLS.popitem(last=False)
    return made


def _parsed(kernel_id: int, text: bytes) -> ir.Module:
    """The module of a call's PTX, parsed once per id."""
    known = _PARSED.get(kernel_id)
    if known is not None and known[0] == text:
        return known[1]
    module = parse(text.decode())
    _PARSED[kernel_id] = (text, module)
    return module


class _Launch:
    """What one launch of a call needs beside its buffers (what a capture records)."""

    def __init__(self, module: ir.Module, entry: str, shape: Launch, scalars: list[bytes],
                 maps: Sequence[sim.ArgTensorMap]) -> None:
        self.module, self.entry, self.shape = module, entry, shape
        self.scalars, self.maps = scalars, maps


class _Layout(NamedTuple):
    """How a call's XLA buffers become device buffers: the buffer of each
    pointer parameter (inputs, then outputs), the outputs that are an
    input's buffer (in place), and which XLA buffer (its parameter) each
    device buffer is."""

    params: list[int]
    aliased: set[int]
    sources: list[int]


def _declared_layout(registered: _registry.Entry, n_in: int, n_out: int) -> _Layout:
    """The layout of a call of a known kernel, from its declarations: an
    output declared in place (:func:`jaxptx.jax.in_place`) is its input's
    buffer, as the call's ``operand_output_aliases`` make XLA pass them;
    every other buffer is one of its own (XLA never hands a kernel one
    buffer for two live values otherwise; an input passed twice is two
    copies, as the CUDA handler's private copies of written inputs are)."""
    aliases = {j: i for i, j in declarations.aliases_of(registered.kernel).items()}
    params = list(range(n_in))
    sources = list(range(n_in))
    for j in range(n_out):
        if j in aliases and aliases[j] < n_in:
            params.append(aliases[j])
        else:
            params.append(len(sources))
            sources.append(n_in + j)
    return _Layout(params, {j for j in aliases if aliases[j] < n_in}, sources)


def _found_layout(inputs: Sequence[memoryview], outputs: Sequence[memoryview]) -> _Layout:
    """The layout of a call of an unknown kernel (a direct call of
    :func:`run`), from the buffers' addresses (:func:`_buffers`)."""
    distinct, params, aliased = _buffers(inputs, outputs)
    sources = [params.index(b) for b in range(len(distinct))]
    return _Layout(params, aliased, sources)


class _Staged:
    """An emulated device kept for a call signature: one allocation per
    device buffer, the launch's params (pointers, raw scalars, TMA maps
    encoded once for those pointers), and a uint8 view of each buffer.
    Each call copies its inputs in, fills its outputs and runs; the device
    holds nothing else between calls (a module with ``.global`` variables,
    whose values would carry over, gets a fresh device every call)."""

    def __init__(self, call: _Call, sizes: list[int], params: list[int]) -> None:
        self.device = sim.Device(captured=False)            # the handler records the call itself
        self.addresses = [self.device.alloc(n) for n in sizes]
        self.views = [self.device.buffers[k][:n] for k, n in enumerate(sizes)]
        pointers = [self.addresses[b] for b in params]
        self.params = [*pointers, *call.values, *(m.encode(pointers[m.arg]) for m in call.maps)]
        self.sizes, self.layout = sizes, params


def _staged(call: _Call, sizes: list[int], params: list[int]) -> _Staged:
    """The call's kept device when it fits this call, else a new one (kept
    unless the module has global variables)."""
    held = call.staged[0]
    if held is not None and held.sizes == sizes and held.layout == params:
        return held
    return _Staged(call, sizes, params)


def _run_staged(call: _Call, inputs: Sequence[memoryview], outputs: Sequence[memoryview],
                output_types: Sequence[BufferType], allow_unwritten: int, capturing: bool) -> _Ran:
    """:func:`_run_checked` for a call that is not a peer's, on the call's
    kept device (:class:`_Staged`): the inputs copied in, the outputs filled
    with the sentinel (zeros where unwritten bytes are allowed), the launch,
    the outputs copied out, and the unwritten-bytes check, which asks the
    device's record of writes only about bytes that still hold the sentinel.
    ``capturing``: keep the buffers' bytes before the launch for the capture."""
    layout = call.layout if call.layout is not None else _found_layout(inputs, outputs)
    n_in = len(inputs)
    views = [*inputs, *outputs]
    sizes = [views[i].nbytes for i in layout.sources]
    checked = [j for j in range(len(outputs))
               if not (allow_unwritten >> j) & 1 and j not in layout.aliased and outputs[j].nbytes]
    with _LAUNCH_LOCK:
        staged = _staged(call, sizes, layout.params)
        device = staged.device
        for b, i in enumerate(layout.sources):
            if i < n_in:
                staged.views[b][:] = np.frombuffer(inputs[i], np.uint8)
            else:
                staged.views[b].fill(0 if (allow_unwritten >> (i - n_in)) & 1 else SENTINEL)
        before = [v.copy() for v in staged.views] if capturing else []
        device.track_stores(bool(checked))
        check = sim.check_mode()      # explicit here: "all" raises below rather than returning
        findings = device.launch(call.module, staged.params, kernel=call.entry,
                                 launch=call.shape, check=check)
        if not device.holds_module_globals:
            call.staged[0] = staged
        if findings:
            raise sim.SanitizerError(f"{len(findings)} sanitizer findings:\n" +
                                     "\n".join(f.message for f in findings), findings)
        for j, mv in enumerate(outputs):
            np.frombuffer(mv, np.uint8)[:] = staged.views[layout.params[n_in + j]]
        for j in checked:
            b = layout.params[n_in + j]
            still = staged.views[b] == SENTINEL
            if not still.any():
                continue
            mask = still & ~device.written(staged.addresses[b], sizes[b])
            if mask.any():
                dtype, shape = output_types[j] if j < len(output_types) and output_types[j][0] else (None, None)
                raise UnwrittenOutputError(unwritten_message(call.name, j, call.names[j], mask, dtype, shape))
        after = [v.tobytes() for v in staged.views] if capturing else []
    return _Ran(before, after, layout.params)


class _Ran(NamedTuple):
    """The last launch of a call: its buffers before and after, and the
    buffer of each pointer parameter."""

    before: list[np.ndarray]
    after: list[bytes]
    params: list[int]


def _run_checked(launch: _peer_cpu.PeerLaunch, inputs: Sequence[memoryview], outputs: Sequence[memoryview],
                 output_types: Sequence[BufferType], allow_unwritten: int, kernel: str,
                 names: Sequence[str | None]) -> _Ran:
    """Run the launch, write the outputs in place, and report unwritten bytes."""
    buffers, params, aliased = _buffers(inputs, outputs)
    checked = [j for j in range(len(outputs))
               if not (allow_unwritten >> j) & 1 and j not in aliased and outputs[j].nbytes]
    fresh = _fill([np.frombuffer(b, np.uint8) for b in buffers], params, len(inputs), len(outputs),
                  aliased, allow_unwritten, SENTINEL)
    result, written = launch.run(fresh, params)
    for j, mv in enumerate(outputs):
        np.frombuffer(mv, np.uint8)[:] = np.frombuffer(result[params[len(inputs) + j]], np.uint8)
    for j in checked:
        b = params[len(inputs) + j]
        mask = unwritten(fresh[b], np.frombuffer(result[b], np.uint8), written[b])
        if mask.any():
            dtype, shape = output_types[j] if j < len(output_types) and output_types[j][0] else (None, None)
            raise UnwrittenOutputError(unwritten_message(kernel, j, names[j], mask, dtype, shape))
    return _Ran(fresh, result, params)


def _output_names(registered: _registry.Entry | None, n: int) -> list[str | None]:
    """The outputs' names in the kernel, where the call is a known kernel's."""
    if registered is None:
        return [None] * n
    names = list(registered.kernel.tensors[len(registered.inputs):])
    return [names[j] if j < len(names) else None for j in range(n)]


def _record(kernel_id: int, ptx: str, launch: _Launch, ran: _Ran, n_in: int,
            tma: Sequence[int], types: Sequence[BufferType]) -> None:
    """Write the capture of a call's last launch (``JAXPTX_CAPTURE_DIR``)."""
    s = launch.shape
    capture.record_ffi("cpu", kernel_id, ptx, launch.entry, (s.grid, s.block, s.cluster, s.smem),
                       n_in, ran.params, [b.tobytes() for b in ran.before], ran.after, types,
                       launch.scalars, tma, len(launch.maps))


def _buffers(inputs: Sequence[memoryview], outputs: Sequence[memoryview]):
    """One host buffer per distinct XLA buffer (an in-place output is its
    input's buffer), the buffer of each pointer parameter, and the outputs
    that alias an input."""
    distinct: list[memoryview] = []
    params: list[int] = []
    aliased: set[int] = set()
    seen: dict[tuple[int, int], int] = {}
    for i, mv in enumerate([*inputs, *outputs]):
        key = (np.frombuffer(mv, np.uint8).ctypes.data, mv.nbytes)
        if mv.nbytes and key in seen:
            params.append(seen[key])
            if i >= len(inputs) and seen[key] < len(inputs):
                aliased.add(i - len(inputs))
            continue
        seen[key] = len(distinct)
        params.append(len(distinct))
        distinct.append(mv)
    return distinct, params, aliased


def _fill(initial: list[np.ndarray], params: list[int], n_in: int, n_out: int,
          aliased: set[int], allow_unwritten: int, sentinel: int) -> list[np.ndarray]:
    """Fresh copies of the buffers for one launch: inputs (and in-place
    outputs) as XLA gave them, other outputs filled with the sentinel
    (zeros where unwritten bytes are allowed)."""
    fresh = [b.copy() for b in initial]
    for j in range(n_out):
        if j not in aliased:
            fresh[params[n_in + j]][:] = 0 if (allow_unwritten >> j) & 1 else sentinel
    return fresh


def _check_sizes(registered: _registry.Entry, inputs: Sequence[memoryview],
                 outputs: Sequence[memoryview]) -> None:
    if len(inputs) != len(registered.inputs) or len(outputs) != len(registered.outputs):
        raise ValueError(f"expected {len(registered.inputs)} inputs and "
                         f"{len(registered.outputs)} outputs, got {len(inputs)} and {len(outputs)}")
    for what, views, types in (("input", inputs, registered.inputs),
                               ("output", outputs, registered.outputs)):
        for i, (mv, (shape, dtype)) in enumerate(zip(views, types)):
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if mv.nbytes != expected:
                raise ValueError(f"{what} {i}: expected {expected} bytes for {dtype}{list(shape)}, "
                                 f"got {mv.nbytes}")


def _entry_function(module: ir.Module, entry: str) -> ir.Function:
    entries = [f for f in module.functions if f.kind == "entry"]
    for f in entries:
        if f.name == entry:
            return f
    raise ValueError(f"the call names entry {entry!r}, but its PTX has no such .entry "
                     f"(it has {', '.join(f.name for f in entries) or 'none'})")


def _scalar_values(function: ir.Function, buffers: int, scalars: Sequence[int]) -> list[bytes]:
    """The raw param values of a call, as the bytes of each declared param."""
    if len(scalars) % 2:
        raise ValueError(f"the scalars attribute has {len(scalars)} entries, "
                         "not (bytes, bits) pairs")
    pairs = list(zip(scalars[::2], scalars[1::2]))
    raw_params = function.params[buffers:buffers + len(pairs)]
    if len(raw_params) != len(pairs):
        raise ValueError(f"the call carries {len(pairs)} raw scalar values, but entry "
                         f"{function.name} has {len(raw_params)} parameters after its "
                         f"{buffers} buffer pointers")
    values = []
    for param, (nbytes, bits) in zip(raw_params, pairs):
        ptype = TYPES.get(param.type)
        if ptype is None or ptype.bits // 8 != nbytes or param.dims or param.vector:
            raise ValueError(f"raw param {param.name} (.{param.type}) got a {nbytes}-byte value")
        values.append(capture.scalar_bytes(nbytes, bits))
    return values


def _message(e: BaseException, kernel_id: int, entry: str, registered: _registry.Entry | None,
             ptx: str) -> str:
    """``ErrorClass: kernel NAME: what went wrong [PTX line N: text], at the
    kernel's Python line (jaxptx_cpu_v2, kernel id K)``: a fault as the
    emulator reports it everywhere, with the Python line of a known kernel."""
    name = registered.kernel.name if registered is not None else entry
    fault = getattr(e, "fault", None)
    if isinstance(fault, Fault):
        python = fault.python
        if python is None and registered is not None and fault.ptx_line is not None:
            python = _python_line(registered, kernel_id, fault.ptx_line)
        text = str(dataclasses.replace(fault, kernel=name, python=python))
    else:
        text = _cited(str(e), kernel_id, registered, ptx)
        if not text.startswith("kernel "):
            text = f"kernel {name}: {text}"
    return f"{type(e).__name__}: {text} ({LABEL}, kernel id {kernel_id})"


def _cited(text: str, kernel_id: int, registered: _registry.Entry | None, ptx: str) -> str:
    """An emulator message (a sanitizer finding, a hang...) with its first
    PTX line's text, the kernel's Python line, and the Python lines of the
    other PTX lines it cites."""
    m = _PTX_LINE.search(text)
    if not m:
        return text
    line = int(m.group(1))
    cited = m.group(0)
    lines = ptx.splitlines()
    if 0 < line <= len(lines) and cited.startswith("["):
        cited = f"[PTX line {line}: {lines[line - 1].strip()}]"
    head, tail = text[:m.start()], text[m.end():]
    if registered is None:
        return head + cited + tail
    tail = _OTHER_LINE.sub(lambda o: _cite(o, registered, kernel_id), tail)
    py = _python_line(registered, kernel_id, line)
    return head + cited + tail + (f", at {py[0]}:{py[1]} in the kernel" if py is not None else "")


_OTHER_LINE = re.compile(r"(?<!\[)PTX line (\d+)(?! \[)")


def _cite(m: re.Match, registered: _registry.Entry, kernel_id: int) -> str:
    """``PTX line N`` followed by the kernel's Python line, where known."""
    py = _python_line(registered, kernel_id, int(m.group(1)))
    return m.group(0) if py is None else f"{m.group(0)} [{Path(py[0]).name}:{py[1]}]"


def _python_line(registered: _registry.Entry, kernel_id: int, ptx_line: int) -> tuple | None:
    """The kernel's Python ``(file, line)`` of the instruction at a PTX line
    (of the text its traced module emits: the call's PTX)."""
    return python_line(registered.spec.module, ptx_line)
