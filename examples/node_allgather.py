"""Collectives between GPUs, written by hand: a ring all-gather over peer
memory with ``.sys`` flags, and a one-shot ``multimem`` all-reduce — run on
an emulated node of 8 GPUs (:class:`jaxptx.sim.System`).

**Ring all-gather.** Device ``r`` starts with its chunk in slot ``r`` of its
output. In step ``s`` it stores slot ``(r - s) mod n`` into the next
device's output (plain stores to a peer's address), then thread 0 publishes
the step with ``st.release.sys`` on the next device's flag and waits with
``ld.acquire.sys`` until its own flag says the previous device has delivered
slot ``(r - s - 1) mod n``. After ``n - 1`` steps every output holds every
chunk. The release/acquire pair at system scope is what makes the peer's
stores visible before the flag: a ``.gpu`` scope would order them for the
writer's own GPU only.

**One-shot all-reduce.** Every device binds its buffer to one multicast
object. Device ``r`` reduces its slice over all devices with
``multimem.ld_reduce`` (one instruction reads the slice on every GPU) and
writes the sum back to every GPU with ``multimem.st``; then the devices
meet at a barrier made of ``multimem.red`` on a multicast flag (each device
adds 1 to the flag on every GPU) and an ``ld.acquire.sys`` spin until its
own copy counts ``n``.

    python examples/node_allgather.py
"""

from __future__ import annotations

import sys

import numpy as np

from jaxptx import kernel, ptx
from jaxptx.sim import System

THREADS = 64
DEVICES = 8


@kernel(arch="sm_90a", block=(THREADS, 1, 1), raw_params=[("u32", "rank")])
def ring_allgather(out, next_out, flag, next_flag, *, n):
    """``out`` holds ``n`` chunks of ``THREADS`` u32; this device's own chunk
    is in slot ``rank`` (the host put it there)."""
    rank = ptx.param("rank")
    tid = ptx.special.tid.x()
    for s in range(n - 1):                                  # Python loop: unrolled at trace time
        slot = ptx.rem.u32(rank + (n - s), n)               # (rank - s) mod n
        off = ptx.mul.wide.u32(slot * THREADS + tid, 4)
        ptx.st.global_.u32(next_out.ptr + off, ptx.ld.global_.u32(out.ptr + off))
        ptx.bar.sync(0)                                     # every thread's stores happen before the release
        with ptx.if_(tid == 0):
            ptx.st.release.sys.global_.u32(next_flag.ptr, s + 1)
            for _ in ptx.while_(lambda s=s: ptx.ld.acquire.sys.global_.u32(flag.ptr) < s + 1):
                pass
        ptx.bar.sync(0)                                     # ... and the acquire before the next step's loads
    ptx.ret()


@kernel(arch="sm_90a", block=(THREADS, 1, 1), raw_params=[("u32", "rank")])
def oneshot_allreduce(data, flags, own_flag, *, n):
    """``data``: a multicast address of ``n * THREADS`` f32 per device;
    ``flags``: a multicast u32; ``own_flag``: this device's copy of it."""
    rank = ptx.param("rank")
    tid = ptx.special.tid.x()
    at = data.ptr + ptx.mul.wide.u32(rank * THREADS + tid, 4)
    total = ptx.multimem.ld_reduce.relaxed.sys.global_.add.f32(at)
    ptx.multimem.st.relaxed.sys.global_.f32(at, total)
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        ptx.multimem.red.release.sys.global_.add.u32(flags.ptr, 1)
        for _ in ptx.while_(lambda: ptx.ld.acquire.sys.global_.u32(own_flag.ptr) < n):
            pass
    ptx.bar.sync(0)
    ptx.ret()


def run_allgather(node: System, chunks: np.ndarray) -> list[np.ndarray]:
    """Each device's output after the ring all-gather of ``chunks[r]``."""
    n = len(node.devices)
    outs, flags = [], []
    for d in node.devices:
        out = np.zeros((n, THREADS), np.uint32)
        out[d.index] = chunks[d.index]
        outs.append(d.to_device(out))
        flags.append(d.alloc(4))
    text = ring_allgather.ptx(n=n)
    node.launch([dict(device=r, source=text, block=THREADS,
                      params=[outs[r], outs[(r + 1) % n], flags[r], flags[(r + 1) % n], r]) for r in range(n)])
    return [d.from_device(a, like=np.zeros((n, THREADS), np.uint32)) for d, a in zip(node.devices, outs)]


def run_allreduce(node: System, x: np.ndarray) -> list[np.ndarray]:
    """Each device's buffer after the one-shot all-reduce of ``x[r]``."""
    n = len(node.devices)
    data, flags = node.multicast(x[0].nbytes), node.multicast(4)
    bufs, own = [], []
    for d in node.devices:
        bufs.append(d.to_device(x[d.index]))
        own.append(d.alloc(4))
        data.bind(d, bufs[-1])
        flags.bind(d, own[-1])
    text = oneshot_allreduce.ptx(n=n)
    node.launch([dict(device=r, source=text, block=THREADS, params=[data.address, flags.address, own[r], r])
                 for r in range(n)])
    return [d.from_device(b, like=x[0]) for d, b in zip(node.devices, bufs)]


def main() -> None:
    """Run both collectives on a node of 8 and check them against numpy."""
    rng = np.random.default_rng(0)
    node = System(DEVICES)
    node.enable_peer_access()
    chunks = rng.integers(0, 1 << 32, (DEVICES, THREADS), dtype=np.uint32)
    gathered = run_allgather(node, chunks)
    if not all(np.array_equal(g, chunks) for g in gathered):
        sys.exit("ring all-gather: does not match numpy")
    print(f"== ring all-gather on {DEVICES} emulated GPUs: every device holds all {DEVICES} chunks ==")

    x = rng.standard_normal((DEVICES, DEVICES * THREADS)).astype(np.float32)
    want = x[0].copy()
    for part in x[1:]:                                      # the device order multimem.ld_reduce sums in
        want += part
    reduced = run_allreduce(node, x)
    if not all(np.array_equal(r, want) for r in reduced):
        sys.exit("one-shot all-reduce: does not match numpy")
    error = float(np.abs(reduced[0] - x.astype(np.float64).sum(axis=0)).max())
    print(f"== one-shot multimem all-reduce on {DEVICES} emulated GPUs: matches numpy "
          f"(max error {error:.1e} against a float64 sum) ==")


if __name__ == "__main__":
    main()
