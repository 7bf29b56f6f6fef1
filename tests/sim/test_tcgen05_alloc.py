"""Tensor-memory allocation on the emulator (PTX ISA tcgen05.alloc /
dealloc / relinquish_alloc_permit) and ``tcgen05.commit``: the address
written to shared memory, CTA pairs, and every misuse the emulator refuses
(double free, freeing columns not allocated, alloc after relinquish, an
alloc that can never be satisfied, touching columns not allocated, leaks at
kernel exit). Every kernel is assembled by ptxas for sm_100a."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.errors import PtxasError
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"


def kernel(body: str, group: int = 1) -> str:
    """32 threads (one warp) per CTA; ``%p1`` is true in every thread;
    ``%rd1`` is the output; ``slot``/``slot2`` receive alloc addresses."""
    return HEAD + f""".visible .entry k(.param .u64 out)
{{
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 slot;
    .shared .align 4 .b32 slot2;
    .reg .pred %p<4>;
    .reg .b16 %rs<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    setp.eq.u32 %p1, %r1, %r1;
    setp.eq.u32 %p2, %r1, 0;
    {body.replace("GROUP", f"cta_group::{group}")}
    ret;
}}
"""


def run(body: str, *, group: int = 1, ctas: int = 1, words: int = 8) -> np.ndarray:
    text = kernel(body, group)
    ptxas(text, "sm_100a")
    out = np.zeros(ctas * words, dtype=np.uint32)
    sim.launch(text, out, block=(32, 1, 1), grid=(ctas, 1, 1), cluster=(ctas, 1, 1))
    return out.reshape(ctas, words)


ALLOC = "tcgen05.alloc.GROUP.sync.aligned.shared::cta.b32 [{slot}], {n};\n    "
DEALLOC = "tcgen05.dealloc.GROUP.sync.aligned.b32 {reg}, {n};\n    "
STORE_SLOTS = """
    ld.shared.b32 %r10, [slot];
    ld.shared.b32 %r11, [slot2];
    mul.wide.u32 %rd2, %r2, 32;
    add.u64 %rd2, %rd1, %rd2;
    @%p2 st.global.v2.u32 [%rd2], {%r10, %r11};
"""


def test_alloc_writes_lane_0_and_the_first_column_and_blocks_are_naturally_aligned() -> None:
    body = (ALLOC.format(slot="slot", n=32) + ALLOC.format(slot="slot2", n=128) + STORE_SLOTS
            + DEALLOC.format(reg="%r10", n=32) + DEALLOC.format(reg="%r11", n=128))
    out = run(body)
    assert out[0, 0] == 0                 # lane 0, column 0
    assert out[0, 1] == 128               # lane 0, the lowest free 128-column block
    # freeing and allocating again reuses the columns
    body = (ALLOC.format(slot="slot", n=512) + "ld.shared.b32 %r10, [slot];" + DEALLOC.format(reg="%r10", n=512)
            + ALLOC.format(slot="slot2", n=256) + STORE_SLOTS + DEALLOC.format(reg="%r11", n=256))
    assert run(body)[0, 1] == 0


def test_pair_allocates_the_same_columns_in_both_ctas() -> None:
    body = (ALLOC.format(slot="slot2", n=64) + ALLOC.format(slot="slot", n=256) + STORE_SLOTS
            + "barrier.cluster.arrive.release.aligned;\n    barrier.cluster.wait.acquire.aligned;\n    "
            + DEALLOC.format(reg="%r10", n=256) + DEALLOC.format(reg="%r11", n=64))
    out = run(body, group=2, ctas=2)
    assert out[:, :2].tolist() == [[256, 0], [256, 0]]


@pytest.mark.parametrize("body, message", [
    (ALLOC.format(slot="slot", n=64) + "ld.shared.b32 %r10, [slot];" + DEALLOC.format(reg="%r10", n=64)
     + DEALLOC.format(reg="%r10", n=64), r"dealloc of 64 columns at column 0 of CTA 0: no allocation holds"),
    (ALLOC.format(slot="slot", n=64) + "ld.shared.b32 %r10, [slot];" + DEALLOC.format(reg="%r10", n=32),
     r"dealloc of 32 columns at column 0 of CTA 0: no allocation holds exactly these columns.*columns 0..63"),
    ("mov.u32 %r10, 64;" + DEALLOC.format(reg="%r10", n=32), r"column 64 of CTA 0: no allocation.*allocated: none"),
    ("tcgen05.relinquish_alloc_permit.GROUP.sync.aligned;\n    " + ALLOC.format(slot="slot", n=32),
     r"PTX line 19\]: CTA 0 allocates tensor memory after giving up its allocation permit "
     r"\(tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned \[PTX line 18\]\)"),
    (ALLOC.format(slot="slot", n=256) + ALLOC.format(slot="slot2", n=512),
     r"alloc of 512 columns cannot be satisfied: CTA 0 holds columns 0..255 .*wait forever"),
    ("mov.u32 %r10, 48;" + ALLOC.format(slot="slot", n="%r10"), r"alloc of 48 columns; expected a power of two"),
    ("mov.u32 %r10, 16;" + ALLOC.format(slot="slot", n="%r10"), r"alloc of 16 columns; expected a power of two"),
    ("mov.u32 %r10, 1024;" + ALLOC.format(slot="slot", n="%r10"), r"alloc of 1024 columns"),
    (ALLOC.format(slot="slot", n=32) + "ld.shared.b32 %r10, [slot];\n    add.u32 %r12, %r10, 32;\n    "
     "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r13}, [%r12];",
     r"tensor memory column 32 \(address 0x00000020\) of CTA 0 is not allocated; allocated: columns 0..31"),
    (ALLOC.format(slot="slot", n=32) + "ld.shared.b32 %r10, [slot];\n    add.u32 %r12, %r10, 30;\n    "
     "tcgen05.st.sync.aligned.32x32b.x4.b32 [%r12], {%r1, %r1, %r1, %r1};",
     r"tcgen05.st.* column 32 .* not allocated"),
    (ALLOC.format(slot="slot", n=32) + "ld.shared.b32 %r10, [slot];\n    add.u32 %r12, %r10, 0x200000;\n    "
     "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r13}, [%r12];",
     r"warp 0 of CTA 0 may access tensor memory lanes 0..31 only.*reaches lanes 32..63"),
    (ALLOC.format(slot="slot", n=64), r"CTA 0 exited still holding tensor memory columns 0..63, allocated by "
                                      r"tcgen05.alloc.* \[PTX line \d+\]"),
])
def test_misuse_is_refused_with_the_cta_and_columns(body: str, message: str) -> None:
    with pytest.raises(SimError, match=message):
        run(body)


def test_leak_names_the_alloc_line() -> None:
    text = kernel(ALLOC.format(slot="slot", n=32))
    line = 1 + text.splitlines().index("    " + ALLOC.format(slot="slot", n=32).replace("GROUP", "cta_group::1")
                                       .strip())
    with pytest.raises(SimError, match=rf"CTA 0 exited still holding .* \[PTX line {line}\]"):
        sim.launch(text, np.zeros(8, np.uint32), block=(32, 1, 1), grid=(1, 1, 1))


def test_pair_with_mismatched_sizes_and_half_a_pair_are_refused() -> None:
    body = ("@%p3 bra SMALL;\n    " + ALLOC.format(slot="slot", n=64) + "\n    bra DONE;\nSMALL:\n    "
            + ALLOC.format(slot="slot", n=32) + "\nDONE:")
    body = "setp.ne.u32 %p3, %r2, 0;\n    " + body
    with pytest.raises(SimError, match=r"peer CTA 0 allocated 64"):
        run(body, group=2, ctas=2)
    body = "setp.ne.u32 %p3, %r2, 0;\n    @%p3 bra DONE;\n    " + ALLOC.format(slot="slot", n=64) + "\nDONE:"
    with pytest.raises(SimError, match=r"CTA 1 exited without its half of the tcgen05.alloc.cta_group::2"):
        run(body, group=2, ctas=2)


def test_partial_warp_alloc_is_refused() -> None:
    body = "setp.lt.u32 %p3, %r1, 16;\n    @%p3 " + ALLOC.format(slot="slot", n=32)
    with pytest.raises(SimError, match=r"16 of the 32 threads of a warp"):
        run(body)


COMMIT_BODY = """
    @%p2 mbarrier.init.shared::cta.b64 [bar], 2;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    mov.u16 %rs1, MASK;
    @%p2 tcgen05.commit.GROUP.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [bar], %rs1;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    mbarrier.test_wait.parity.shared::cta.b64 %p3, [bar], 0;
    selp.u32 %r10, 1, 0, %p3;
    mbarrier.pending_count.b64 %r11, %rd3;
    mul.wide.u32 %rd2, %r2, 32;
    add.u64 %rd2, %rd1, %rd2;
    @%p2 st.global.u32 [%rd2], %r10;
"""


def test_commit_arrives_once_at_once_and_multicast_reaches_each_cta_of_the_mask() -> None:
    # Two CTAs, each commits once with the mask: CTA r's mbarrier (count 2)
    # completes its phase only when both commits reach it.
    body = COMMIT_BODY.replace("MASK", "3").replace("    mbarrier.pending_count.b64 %r11, %rd3;\n", "")
    assert run(body, group=2, ctas=2)[:, 0].tolist() == [1, 1]
    # Mask 0b01: both arrivals land on CTA 0's mbarrier; CTA 1's stays pending.
    body = COMMIT_BODY.replace("MASK", "1").replace("    mbarrier.pending_count.b64 %r11, %rd3;\n", "")
    assert run(body, group=2, ctas=2)[:, 0].tolist() == [1, 0]


def test_commit_mask_outside_the_cluster_is_refused() -> None:
    body = COMMIT_BODY.replace("MASK", "4").replace("    mbarrier.pending_count.b64 %r11, %rd3;\n", "")
    with pytest.raises(SimError, match=r"ctaMask 0x0004 names CTAs outside the cluster of 2"):
        run(body, group=2, ctas=2)


def test_mixed_cta_groups_in_one_kernel_are_refused() -> None:
    """ptxas refuses the kernel; the emulator, which may get unassembled PTX, too."""
    body = ALLOC.format(slot="slot", n=32).replace("GROUP", "cta_group::1") + \
        "tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;"
    text = kernel(body)
    with pytest.raises(PtxasError, match=r"cta_group::1\) and CTA pair granularity"):
        ptxas(text, "sm_100a")
    with pytest.raises(SimError, match=r"all tcgen05 instructions of a kernel must give the same .cta_group"):
        sim.launch(text, np.zeros(16, np.uint32), block=(32, 1, 1), grid=(2, 1, 1), cluster=(2, 1, 1))
