"""What each emulator operation of the table (an entry's ``sim``) is, beside
its semantics: the unit it runs on, how its memory traffic counts, and the
asynchronous and warp-collective behaviour the sanitizer checks.

The profiler's instruction classes (:mod:`jaxptx.profile.mix`) and the
sanitizer's rules (:mod:`jaxptx.sim.core.sanitizer`) read :data:`UNITS`, so
every form of one operation is seen the same way by both. Operations not
listed are arithmetic and logic: their class follows their type (integer,
fp32, fp16...). A test holds every ``sim`` of the table to being listed or
typed arithmetic, so a new operation cannot fall silently into the wrong
class.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Unit", "UNITS", "MIX_CLASSES"]

MIX_CLASSES = ("control", "sync", "warp", "tensor", "memory", "memory.shared", "memory.async_copy", "memory.tma",
               "tensor_memory", "move", "convert", "sfu", "other")
"""The classes a :class:`Unit` may name (``memory``: the space comes from the
instruction's modifiers; ``sfu``: only with ``.approx``, else by type)."""


@dataclasses.dataclass(frozen=True)
class Unit:
    """How one operation is seen outside its semantics.

    Attributes:
        cls: its instruction-mix class (:data:`MIX_CLASSES`).
        traffic: how its memory accesses count: ``"lsu"`` (warp-level
            requests), ``"tensor"`` (tensor-core operand reads through
            shared-memory descriptors), ``"tma"`` (bulk copies), ``"none"``.
        wait: for synchronisation, what it waits for: ``"barrier"``,
            ``"mbarrier"`` or ``"fence"`` (``None``: it does not wait).
        async_reads: its shared-memory operands are read by the async proxy
            until the wait of this kind (``"wgmma"``, ``"tcgen05"``).
        async_results: its destination registers are written asynchronously,
            defined only after the wait of this kind (``"wgmma"``,
            ``"tcgen05"``).
        member_mask: a warp collective whose ``membermask`` lanes must all
            execute it (and whose sources must lie among them).
        warpgroup: the four warps of a warpgroup execute it together (the
            emulator runs their threads in one step under every schedule).
    """

    cls: str
    traffic: str = "none"
    wait: str | None = None
    async_reads: str | None = None
    async_results: str | None = None
    member_mask: bool = False
    warpgroup: bool = False


def _each(names: str, unit: Unit) -> dict[str, Unit]:
    return dict.fromkeys(names.split(), unit)


_TENSOR_READS = Unit("tensor", traffic="tensor", async_reads="tcgen05")

UNITS: dict[str, Unit] = {
    **_each("bra brx_idx call ret exit trap", Unit("control")),
    **_each("bar_sync bar_red barrier_cluster_wait", Unit("sync", wait="barrier")),
    **_each("mbarrier_try_wait mbarrier_try_wait_parity mbarrier_test_wait mbarrier_test_wait_parity",
            Unit("sync", wait="mbarrier")),
    **_each("fence fence_proxy tcgen05_fence wgmma_fence tensormap_cp_fenceproxy", Unit("sync", wait="fence")),
    **_each("bar_arrive barrier_cluster_arrive bar_warp_sync wgmma_commit_group wgmma_wait_group "
            "cp_async_commit_group cp_async_wait_group cp_async_bulk_commit_group cp_async_bulk_wait_group "
            "tcgen05_commit tcgen05_wait cp_async_mbarrier_arrive mbarrier_arrive mbarrier_arrive_drop "
            "mbarrier_arrive_drop_expect_tx mbarrier_arrive_drop_noComplete mbarrier_arrive_expect_tx "
            "mbarrier_arrive_noComplete mbarrier_complete_tx mbarrier_expect_tx mbarrier_init mbarrier_inval "
            "mbarrier_pending_count clusterlaunchcontrol_try_cancel", Unit("sync")),
    **_each("shfl_sync vote_sync match_all_sync match_any_sync redux_sync elect_sync", Unit("warp", member_mask=True)),
    "activemask": Unit("warp"),
    "mma_sync": Unit("tensor"),
    "wmma_mma": Unit("tensor"),
    "wgmma_mma_async": Unit("tensor", traffic="tensor", async_reads="wgmma", async_results="wgmma",
                            warpgroup=True),
    **_each("tcgen05_mma tcgen05_mma_sp tcgen05_mma_ashift", _TENSOR_READS),
    **_each("ld st atom atom_cas red wmma_load wmma_store multimem_ld_reduce multimem_st multimem_red",
            Unit("memory", traffic="lsu")),
    **_each("ldmatrix stmatrix", Unit("memory.shared", traffic="lsu")),
    "cp_async": Unit("memory.async_copy", traffic="lsu"),
    **_each("cp_async_bulk cp_async_bulk_tensor cp_async_bulk_prefetch multimem_cp_async_bulk "
            "multimem_cp_reduce_async_bulk", Unit("memory.tma", traffic="tma")),
    "tcgen05_cp": Unit("tensor_memory", traffic="tensor", async_reads="tcgen05"),
    "tcgen05_ld": Unit("tensor_memory", async_results="tcgen05"),
    **_each("tcgen05_st tcgen05_shift tcgen05_alloc tcgen05_dealloc tcgen05_relinquish", Unit("tensor_memory")),
    **_each("mov cvta mapa getctarank createpolicy tensormap_replace clusterlaunchcontrol_query_cancel",
            Unit("move")),
    **_each("cvt cvt_pack", Unit("convert")),
    **_each("rcp sqrt rsqrt sin cos lg2 ex2 tanh", Unit("sfu")),
    **_each("nanosleep prefetch pmevent griddepcontrol setmaxnreg brkpt", Unit("other")),
}
"""Every non-arithmetic operation of the table, by its ``sim`` name."""
