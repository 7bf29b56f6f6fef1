"""Instruction table entries: Hopper warpgroup MMA, mbarriers and clusters.

PTX ISA sections "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
Instructions: wgmma", "Parallel Synchronization and Communication
Instructions: mbarrier", "Data Movement and Conversion Instructions: mapa /
getctarank", "Miscellaneous Instructions: setmaxnreg" and "Parallel
Synchronization and Communication Instructions: barrier.cluster" (the bulk
and tensor copies are in :mod:`._tma`).

``wgmma.mma_async`` accumulators: each thread of the warpgroup holds
``64*N/128 = N/2`` elements of D, in ``.f32``/``.s32`` registers or packed
two per ``.f16x2`` register (``N/4``). A from registers is four ``.b32``
registers; A and B from shared memory are 64-bit matrix descriptors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ._schema import Inst, Operand, Rule, Slot, op, slot
from ._targets import SM100_FAMILY, Requires
from ._common import SM80, SM90_PTX78, SM90_PTX80, SM90_PTX86
from ._fidelity import FLOAT_MMA, reading

PTX78 = Requires(ptx=(7, 8))
PTX80 = Requires(ptx=(8, 0))
SM90A = Requires(sm=90, ptx=(8, 0), only=("sm_90a",))
# setmaxnreg: every arch-specific target from sm_90a on (ptxas 13.0).
SETMAXNREG_TARGETS = ("sm_90a", *SM100_FAMILY, "sm_120a", "sm_121a", "sm_120f", "sm_121f")

# Section titles carry the chapter number only, except where checked.
_WGMMA_SEC = "9.7.15 Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
_WGMMA_MMA_SEC = ("9.7.15.5.2 Asynchronous Multiply-and-Accumulate Instruction: "
                  "wgmma.mma_async")
_MBAR_SEC = "9.7.13 Parallel Synchronization and Communication Instructions: mbarrier"
_MAPA_SEC = "9.7.9 Data Movement and Conversion Instructions: mapa"
_GETCTARANK_SEC = "9.7.9 Data Movement and Conversion Instructions: getctarank"
_SETMAXNREG_SEC = "Miscellaneous Instructions: setmaxnreg"
_BARRIER_CLUSTER_SEC = ("9.7.13 Parallel Synchronization and Communication Instructions: "
                        "barrier.cluster")

SYNC = (slot("sync", "sync"), slot("aligned", "aligned"))

# --- wgmma -------------------------------------------------------------------

_WGMMA_SHAPE_RE = re.compile(r"^m64n(\d+)k\d+$")


def wgmma_d(values: Mapping[str, str]) -> int:
    """Registers in the D fragment of ``wgmma.mma_async`` (``m64nNk*``)."""
    m = _WGMMA_SHAPE_RE.match(values["shape"])
    assert m is not None, values["shape"]
    n = int(m.group(1))
    return n // 4 if values["dtype"] == "f16" else n // 2


COUNTS = {"wgmma_d": wgmma_d}

# N = 8..256 step 8 for floating-point inputs; integer and single-bit inputs
# allow 8, 16, 24, then multiples of 16 (ptxas: "Illegal matrix shape
# '.m64n40k32' for instruction 'wgmma.mma_async with integer types'").
_N_FLOAT = tuple(range(8, 257, 8))
_N_INT = (8, 16, 24, *range(32, 257, 16))


def _shapes(k: int, ns: tuple[int, ...]) -> str:
    return " ".join(f"m64n{n}k{k}" for n in ns)


_ACC = {"f32": "f32", "f16": "f16x2", "s32": "s32"}
_A_DESC = op("a_desc", "reg", "u64")
_A_REGS = op("a", "vec", "b32", count=4)
# Where both A forms take the same number of operands the form resolver
# cannot tell them apart, so one operand accepts a descriptor register or
# a vector of four .b32 registers.
_A_EITHER = op("a", "vec reg", None, count=4)
_B_DESC = op("b_desc", "reg", "u64")
_SCALE_D = op("scale_d", "pred imm", "pred", neg=True)
_IMM_SCALE_A = op("imm_scale_a", "imm", "s32", example="1")
_IMM_SCALE_B = op("imm_scale_b", "imm", "s32", example="-1")
_IMM_TRANS_A = op("imm_trans_a", "imm", "u32", example="0")
_IMM_TRANS_B = op("imm_trans_b", "imm", "u32", example="1")
_SCALES = (_SCALE_D, _IMM_SCALE_A, _IMM_SCALE_B)
_SAME_HALF = tuple(Rule("atype", "btype", (t,), (t,)) for t in ("f16", "bf16"))
_SAME_INT = tuple(Rule("atype", "btype", (t,), (t,)) for t in ("s8", "u8"))
_MIXED_INT = (Rule("atype", "btype", ("s8",), ("u8",)), Rule("atype", "btype", ("u8",), ("s8",)))


def _wgmma(shapes: str, dtype: str, atypes: str, btypes: str, a: Operand,
           rest: tuple[Operand, ...], *, extra: tuple[Slot, ...] = (),
           tail: tuple[Slot, ...] = (), rules: tuple[Rule, ...] = (),
           requires: Requires = SM90A, summary: str) -> Inst:
    return Inst(
        "wgmma.mma_async",
        (*SYNC, slot("shape", shapes), *extra, slot("dtype", dtype), slot("atype", atypes),
         slot("btype", btypes), *tail),
        (op("d", "vec", _ACC[dtype], out=True, count="wgmma_d"), a, _B_DESC, *rest),
        requires=requires, rules=rules, section=_WGMMA_MMA_SEC, sim="wgmma_mma_async",
        summary=summary, fidelity=(reading(FLOAT_MMA, when={"dtype": "f32 f16"}),))


_K16 = _shapes(16, _N_FLOAT)
_HALF_SUMMARY = "warpgroup f16/bf16 matrix multiply-accumulate"
_F8_SUMMARY = "warpgroup fp8 matrix multiply-accumulate"
_INT_SUMMARY = "warpgroup 8-bit integer matrix multiply-accumulate"
_WGMMA = (
    # A from a shared-memory descriptor: both inputs may be transposed.
    _wgmma(_K16, "f32", "f16 bf16", "f16 bf16", _A_DESC,
           (*_SCALES, _IMM_TRANS_A, _IMM_TRANS_B), rules=_SAME_HALF, summary=_HALF_SUMMARY),
    # A from registers: only B may be transposed.
    _wgmma(_K16, "f32", "f16 bf16", "f16 bf16", _A_REGS, (*_SCALES, _IMM_TRANS_B),
           rules=_SAME_HALF, summary=_HALF_SUMMARY),
    _wgmma(_K16, "f16", "f16", "f16", _A_DESC, (*_SCALES, _IMM_TRANS_A, _IMM_TRANS_B),
           summary=_HALF_SUMMARY),
    _wgmma(_K16, "f16", "f16", "f16", _A_REGS, (*_SCALES, _IMM_TRANS_B), summary=_HALF_SUMMARY),
    _wgmma(_shapes(8, _N_FLOAT), "f32", "tf32", "tf32", _A_EITHER, _SCALES,
           summary="warpgroup tf32 matrix multiply-accumulate"),
    *(_wgmma(_shapes(32, _N_FLOAT), acc, "e4m3 e5m2", "e4m3 e5m2", _A_EITHER, _SCALES,
             summary=_F8_SUMMARY) for acc in ("f32", "f16")),
    _wgmma(_shapes(32, _N_INT), "s32", "s8 u8", "s8 u8", _A_EITHER, (_SCALE_D,),
           extra=(slot("satfinite", "satfinite", optional=True),), rules=_SAME_INT,
           summary=_INT_SUMMARY),
    # Mixed signedness (s8 x u8) arrived with PTX 8.4.
    _wgmma(_shapes(32, _N_INT), "s32", "s8 u8", "s8 u8", _A_EITHER, (_SCALE_D,),
           extra=(slot("satfinite", "satfinite", optional=True),), rules=_MIXED_INT,
           requires=Requires(sm=90, ptx=(8, 4), only=("sm_90a",)), summary=_INT_SUMMARY),
    _wgmma(_shapes(256, _N_INT), "s32", "b1", "b1", _A_EITHER, (_SCALE_D,),
           tail=(slot("bitop", "and"), slot("popc", "popc")),
           summary="warpgroup single-bit matrix multiply-accumulate (popcount of AND)"),
)


# --- mbarrier ----------------------------------------------------------------

_ADDR = op("addr", "mem")
_COUNT = op("count", "reg imm", "u32")
_COUNT_OPT = op("count", "reg imm", "u32", optional=True)
_TX = op("tx_count", "reg imm", "u32")
# The state may be discarded with ``_`` (ptxas wants PTX 7.8 for that).
_STATE_OUT = op("state", "reg sink", "b64", out=True)
_SINK_OUT = op("state", "sink")
_B64 = slot("type", "b64")
_CTA_SPACE = slot("space", "shared shared::cta", optional=True, requires={"shared::cta": PTX78})
_CLUSTER_SPACE = slot("space", "shared::cluster", requires={"shared::cluster": SM90_PTX80})
_SCOPE = slot("scope", "cta cluster", optional=True,
              requires={"cta": PTX80, "cluster": SM90_PTX80})
# ptxas: "Modifier '.release' requires scope", "Modifier '.cta' requires order".
_SEM_SCOPE = (Rule("sem", "scope"), Rule("scope", "sem"))


def _sem(values: str) -> Slot:
    return slot("sem", values, optional=True,
                requires={"release": PTX80, "acquire": PTX80, "relaxed": SM90_PTX86})


def _sim(opcode: str) -> str:
    """``mbarrier.arrive.expect_tx`` → ``mbarrier_arrive_expect_tx``."""
    return opcode.replace(".", "_")


def _arrive(opcode: str, count: Operand | None, requires: Requires,
            summary: str) -> tuple[Inst, ...]:
    """The forms of an arrive-like opcode: on a barrier of this CTA (giving
    back its state) and on one of another CTA in the cluster (state ``_``).

    ``count=None``: the arrival count is optional and, when given, needs
    sm_90 (ptxas: "mbarrier.arrive with count argument and without
    '.noComplete' modifier requires .target sm_90"), so it gets its own form.
    """
    sem = _sem("release relaxed")
    cta = (sem, _SCOPE, _CTA_SPACE, _B64)
    cluster = (sem, _SCOPE, _CLUSTER_SPACE, _B64)
    if count is None:
        forms = ((cta, (_STATE_OUT, _ADDR), requires),
                 (cta, (_STATE_OUT, _ADDR, _COUNT), SM90_PTX78),
                 (cluster, (_SINK_OUT, _ADDR, _COUNT_OPT), SM90_PTX80))
    else:
        forms = ((cta, (_STATE_OUT, _ADDR, count), requires),
                 (cluster, (_SINK_OUT, _ADDR, count), SM90_PTX80))
    return tuple(Inst(opcode, slots, operands, requires=req, rules=_SEM_SCOPE,
                      section=_MBAR_SEC, sim=_sim(opcode), summary=summary)
                 for slots, operands, req in forms)


def _no_complete(opcode: str, summary: str) -> Inst:
    scope = slot("scope", "cta", optional=True, requires={"cta": PTX80})
    return Inst(opcode, (_sem("release"), scope, _CTA_SPACE, _B64),
                (op("state", "reg", "b64", out=True), _ADDR, _COUNT), requires=SM80,
                rules=_SEM_SCOPE, section=_MBAR_SEC, sim=_sim(opcode), summary=summary)


def _wait(opcode: str, phase: Operand, requires: Requires, hint: bool, summary: str) -> Inst:
    operands = (op("wait_complete", "pred", "pred", out=True), _ADDR, phase)
    if hint:
        operands += (op("suspend_time_hint", "reg imm", "u32", optional=True),)
    return Inst(opcode, (_sem("acquire relaxed"), _SCOPE, _CTA_SPACE, _B64), operands,
                requires=requires, rules=_SEM_SCOPE, section=_MBAR_SEC, sim=_sim(opcode),
                summary=summary)


def _tx(opcode: str, summary: str) -> Inst:
    space = slot("space", "shared shared::cta shared::cluster", optional=True)
    return Inst(opcode, (_sem("relaxed"), _SCOPE, space, _B64), (_ADDR, _TX),
                requires=SM90_PTX80, rules=_SEM_SCOPE, section=_MBAR_SEC, sim=_sim(opcode),
                summary=summary)


_PHASE_STATE = op("state", "reg", "b64")
_PHASE_PARITY = op("phase_parity", "reg imm", "u32")

_MBARRIER = (
    Inst("mbarrier.init", (_CTA_SPACE, _B64), (_ADDR, _COUNT), requires=SM80,
         section=_MBAR_SEC, sim="mbarrier_init",
         summary="initialise an mbarrier with an expected arrival count"),
    Inst("mbarrier.inval", (_CTA_SPACE, _B64), (_ADDR,), requires=SM80, section=_MBAR_SEC,
         sim="mbarrier_inval", summary="invalidate an mbarrier"),
    *_arrive("mbarrier.arrive", None, SM80, "arrive on an mbarrier"),
    *_arrive("mbarrier.arrive.expect_tx", _TX, SM90_PTX80,
             "arrive on an mbarrier and expect tx_count more transaction bytes"),
    _no_complete("mbarrier.arrive.noComplete",
                 "arrive count times on an mbarrier without completing the phase"),
    *_arrive("mbarrier.arrive_drop", None, SM80,
             "arrive on an mbarrier and drop out of later phases"),
    *_arrive("mbarrier.arrive_drop.expect_tx", _TX, SM90_PTX80,
             "arrive_drop and expect tx_count more transaction bytes"),
    _no_complete("mbarrier.arrive_drop.noComplete",
                 "arrive_drop count times without completing the phase"),
    _tx("mbarrier.expect_tx", "expect tx_count more transaction bytes on an mbarrier"),
    _tx("mbarrier.complete_tx", "complete tx_count transaction bytes on an mbarrier"),
    _wait("mbarrier.test_wait", _PHASE_STATE, SM80, False,
          "test (without blocking) whether the phase named by state completed"),
    _wait("mbarrier.test_wait.parity", _PHASE_PARITY, Requires(sm=80, ptx=(7, 1)), False,
          "test (without blocking) whether the phase of the given parity completed"),
    _wait("mbarrier.try_wait", _PHASE_STATE, SM90_PTX78, True,
          "wait (with a time limit) for the phase named by state to complete"),
    _wait("mbarrier.try_wait.parity", _PHASE_PARITY, SM90_PTX78, True,
          "wait (with a time limit) for the phase of the given parity to complete"),
    Inst("mbarrier.pending_count", (_B64,),
         (op("count", "reg", "u32", out=True), op("state", "reg", "b64")), requires=SM80,
         section=_MBAR_SEC, sim="mbarrier_pending_count",
         summary="pending arrivals recorded in an mbarrier state"),
)

# --- clusters and registers ------------------------------------------------------

_CLUSTER_ADDR = slot("space", "shared::cluster", optional=True)
_MISC = (
    Inst("mapa", (_CLUSTER_ADDR, slot("type", "u32 u64")),
         (op("d", "reg", "$type", out=True), op("a", "reg", "$type"), op("b", "reg imm", "u32")),
         requires=SM90_PTX78, section=_MAPA_SEC, sim="mapa",
         summary="map an address of this CTA's shared memory into CTA b of the cluster"),
    Inst("getctarank", (_CLUSTER_ADDR, slot("type", "u32 u64")),
         (op("d", "reg", "u32", out=True), op("a", "reg", "$type")),
         requires=SM90_PTX78, section=_GETCTARANK_SEC, sim="getctarank",
         summary="rank of the CTA whose shared memory holds an address"),
    Inst("setmaxnreg", (slot("action", "inc dec"), *SYNC, slot("type", "u32")),
         (op("imm_reg_count", "imm", "u32", example="240"),),
         requires=Requires(sm=90, ptx=(8, 0), only=SETMAXNREG_TARGETS),
         section=_SETMAXNREG_SEC, sim="setmaxnreg",
         summary="raise or lower the warp's register budget (multiple of 8 in 24..256)"),
    Inst("barrier.cluster.arrive",
         (slot("sem", "release relaxed", optional=True,
               requires={"release": PTX80, "relaxed": PTX80}),
          slot("aligned", "aligned", optional=True)),
         requires=SM90_PTX78, section=_BARRIER_CLUSTER_SEC, sim="barrier_cluster_arrive",
         summary="arrive at the cluster barrier"),
    Inst("barrier.cluster.wait",
         (slot("sem", "acquire", optional=True, requires={"acquire": PTX80}),
          slot("aligned", "aligned", optional=True)),
         requires=SM90_PTX78, section=_BARRIER_CLUSTER_SEC, sim="barrier_cluster_wait",
         summary="wait for all CTAs of the cluster to arrive at the cluster barrier"),
)

ENTRIES: tuple[Inst, ...] = (
    Inst("wgmma.fence", SYNC, requires=SM90A, section=_WGMMA_SEC + ": wgmma.fence",
         sim="wgmma_fence", summary="order register accesses before wgmma.mma_async"),
    Inst("wgmma.commit_group", SYNC, requires=SM90A,
         section=_WGMMA_SEC + ": wgmma.commit_group", sim="wgmma_commit_group",
         summary="commit pending wgmma.mma_async operations as a group"),
    Inst("wgmma.wait_group", SYNC, (op("n", "imm", "u32", example="0"),), requires=SM90A,
         section=_WGMMA_SEC + ": wgmma.wait_group", sim="wgmma_wait_group",
         summary="wait until at most n wgmma groups are pending"),
    *_WGMMA,
    *_MBARRIER,
    *_MISC,
)
