"""Instruction table entries: control flow, barriers, fences and the
miscellaneous instructions.

PTX ISA sections "Control Flow Instructions" (``bra``, ``brx.idx``,
``call``, ``ret``, ``exit``), "Parallel Synchronization and Communication
Instructions" (``bar``/``barrier``, ``bar.warp.sync``, ``membar``/``fence``,
``griddepcontrol``) and "Miscellaneous Instructions" (``brkpt``,
``nanosleep``, ``pmevent``, ``trap``).

``call`` is only partly described: its parenthesised return and argument
lists have no operand kind, so the table holds the forms without them.
"""

from __future__ import annotations

from ._schema import Inst, Rule, Slot, op, slot
from ._targets import Requires
from ._common import SM90_PTX78, SM90_PTX83, SM90_PTX86

SCOPES = "cta cluster gpu sys"
SYNC_RESTRICT = "sync_restrict::shared::cluster sync_restrict::shared::cta"
# .sync_restrict::shared::cluster goes with .acquire, ::shared::cta with .release.
RESTRICT_RULES = (
    Rule("sem", "restrict", ("acquire",), ("sync_restrict::shared::cluster",)),
    Rule("sem", "restrict", ("release",), ("sync_restrict::shared::cta",)),
)

_CF_SEC = "9.7.12.{} Control Flow Instructions: {}"
_SYNC_SEC = "9.7.13.{} Parallel Synchronization and Communication Instructions: {}"
_MISC_SEC = "9.7.19.{} Miscellaneous Instructions: {}"
_BAR_SEC = _SYNC_SEC.format(1, "bar, barrier")
_FENCE_SEC = _SYNC_SEC.format(4, "membar / fence")

UNI = slot("uni", "uni", optional=True)
TARGET = op("tgt", "sym")
BAR_ID = op("a", "reg imm", "u32")
# The thread count is whole warps (PTX ISA, bar: "When specifying a thread
# count, the value must be a multiple of the warp size"; ptxas: "Number of
# threads participating in barrier must be in multiple of warp size").
WHOLE_WARPS = (32, "a thread count of whole warps")
BAR_COUNT = op("b", "reg imm", "u32", multiple=WHOLE_WARPS)
BAR_COUNT_OPT = op("b", "reg imm", "u32", optional=True, multiple=WHOLE_WARPS)
BAR_PRED = op("c", "pred", neg=True)


def _bar(opcode: str, aligned: bool, requires: Requires) -> tuple[Inst, ...]:
    """The sync, arrive and red forms of ``bar`` or (with ``.aligned``) ``barrier``."""
    cta = slot("cta", "cta", optional=True, requires={"cta": Requires(ptx=(7, 8))})
    al: tuple[Slot, ...] = (slot("aligned", "aligned", optional=True),) if aligned else ()
    popc = (cta, slot("mode", "red"), slot("op", "popc"), *al, slot("type", "u32"))
    logic = (cta, slot("mode", "red"), slot("op", "and or"), *al, slot("type", "pred"))
    d_popc = op("d", "reg", "u32", out=True)
    d_pred = op("p", "pred", out=True)
    forms = (
        ((cta, slot("mode", "sync"), *al), (BAR_ID, BAR_COUNT_OPT), "bar_sync",
         "wait at a CTA barrier"),
        ((cta, slot("mode", "arrive"), *al), (BAR_ID, BAR_COUNT), "bar_arrive",
         "arrive at a CTA barrier without waiting"),
        (popc, (d_popc, BAR_ID, BAR_PRED), "bar_red", "CTA barrier counting true predicates"),
        (popc, (d_popc, BAR_ID, BAR_COUNT, BAR_PRED), "bar_red",
         "CTA barrier counting true predicates, with a thread count"),
        (logic, (d_pred, BAR_ID, BAR_PRED), "bar_red", "CTA barrier and/or-reducing a predicate"),
        (logic, (d_pred, BAR_ID, BAR_COUNT, BAR_PRED), "bar_red",
         "CTA barrier and/or-reducing a predicate, with a thread count"),
    )
    return tuple(Inst(opcode, slots, operands, requires=requires, section=_BAR_SEC, sim=sim,
                      summary=summary) for slots, operands, sim, summary in forms)


_CALLEE = op("func", "sym reg", "u64")
_PROTO = op("proto", "sym", optional=True)

ENTRIES: tuple[Inst, ...] = (
    Inst("bra", (UNI,), (TARGET,), section=_CF_SEC.format(3, "bra"), sim="bra",
         summary="branch to a label"),
    # tlist must name a .branchtargets directive, which the generator cannot
    # write, so the form carries one.
    Inst("brx.idx", (UNI,), (op("index", "reg imm", "u32"), op("tlist", "sym")),
         requires=Requires(sm=30, ptx=(6, 0)), section=_CF_SEC.format(4, "brx.idx"),
         sim="brx_idx", summary="branch to a label chosen by index from a list",
         example="brxt0: .branchtargets $L__example; brx.idx 0, brxt0;"),
    # A direct call needs a .func declared at module scope, which a generated
    # example cannot add; the example is an indirect call through a
    # prototype declared in place (func is then a register, proto the
    # prototype's label).
    # call{.uni} {(ret-list),} func{, (arg-list)}{, proto}: the lists are
    # parenthesised operand lists; an indirect call names the function in a
    # register and a prototype (or target list) after the arguments.
    Inst("call", (UNI,), (_CALLEE, op("args", "list", optional=True), _PROTO),
         section=_CF_SEC.format(5, "call"), sim="call", summary="call a function",
         example=".reg .u64 %callfp0; callpt0: .callprototype _ (); call %callfp0, callpt0;"),
    Inst("call", (UNI,), (op("ret", "list", out=True), _CALLEE, op("args", "list", optional=True), _PROTO),
         section=_CF_SEC.format(5, "call"), sim="call", summary="call a function that returns values",
         example=".reg .u64 %callfp0; .param .b32 r0; callpt0: .callprototype (.param .b32 _) _ (); "
                 "call (r0), %callfp0, callpt0;"),
    Inst("ret", (UNI,), section=_CF_SEC.format(6, "ret"), sim="ret",
         summary="return from a function"),
    Inst("exit", section=_CF_SEC.format(7, "exit"), sim="exit", summary="terminate the thread"),
    *_bar("bar", aligned=False, requires=Requires()),
    *_bar("barrier", aligned=True, requires=Requires(sm=30, ptx=(6, 0))),
    Inst("bar.warp.sync", (), (op("membermask", "reg imm", "b32"),),
         requires=Requires(sm=30, ptx=(6, 0)), section=_SYNC_SEC.format(2, "bar.warp.sync"),
         sim="bar_warp_sync", summary="wait for the threads of a warp named by a mask"),
    Inst("membar", (slot("level", "cta gl sys"),), section=_FENCE_SEC, sim="fence",
         summary="order memory accesses (old style fence)"),
    Inst("membar.proxy", (slot("kind", "alias"),), requires=Requires(sm=60, ptx=(7, 5)),
         section=_FENCE_SEC, sim="fence_proxy", summary="order accesses through aliased addresses"),
    Inst("fence", (slot("sem", "sc acq_rel acquire release", optional=True,
                        requires={"acquire": SM90_PTX86, "release": SM90_PTX86}),
                   slot("scope", SCOPES, requires={"cluster": SM90_PTX78})),
         requires=Requires(sm=70, ptx=(6, 0)), section=_FENCE_SEC, sim="fence",
         summary="order memory accesses at a scope"),
    Inst("fence", (slot("sem", "acquire release"), slot("restrict", SYNC_RESTRICT),
                   slot("scope", "cluster")),
         rules=RESTRICT_RULES, requires=SM90_PTX86, section=_FENCE_SEC, sim="fence",
         summary="cluster fence restricted to one shared-memory window"),
    Inst("fence", (slot("op_restrict", "mbarrier_init"), slot("sem", "release"),
                   slot("scope", "cluster")),
         requires=Requires(sm=90, ptx=(8, 0)), section=_FENCE_SEC, sim="fence",
         summary="release prior mbarrier.init operations to the cluster"),
    Inst("fence.proxy", (slot("kind", "alias async",
                              requires={"async": Requires(sm=90, ptx=(8, 0))}),
                         slot("space", "global shared::cta shared::cluster", optional=True)),
         rules=(Rule("space", "kind", (), ("async",)),),
         requires=Requires(sm=70, ptx=(7, 5)), section=_FENCE_SEC, sim="fence_proxy",
         summary="bi-directional proxy fence"),
    Inst("fence.proxy", (slot("kind", "tensormap::generic"), slot("sem", "release"),
                         slot("scope", SCOPES)),
         requires=SM90_PTX83, section=_FENCE_SEC, sim="fence_proxy",
         summary="release generic-proxy writes to the tensormap proxy"),
    Inst("fence.proxy", (slot("kind", "tensormap::generic"), slot("sem", "acquire"),
                         slot("scope", SCOPES)),
         (op("addr", "mem"), op("size", "imm", "u32", example="128")),
         requires=SM90_PTX83, section=_FENCE_SEC, sim="fence_proxy",
         summary="acquire a 128-byte tensor map in the tensormap proxy"),
    Inst("fence.proxy", (slot("kind", "async::generic"), slot("sem", "acquire release"),
                         slot("restrict", SYNC_RESTRICT), slot("scope", "cluster")),
         rules=RESTRICT_RULES, requires=SM90_PTX86, section=_FENCE_SEC, sim="fence_proxy",
         summary="uni-directional generic-to-async proxy fence on shared memory"),
    Inst("griddepcontrol", (slot("action", "launch_dependents wait"),), requires=SM90_PTX78,
         section=_SYNC_SEC.format(13, "griddepcontrol"), sim="griddepcontrol",
         summary="launch dependent grids or wait for prerequisite grids"),
    Inst("brkpt", section=_MISC_SEC.format(1, "brkpt"), sim="brkpt",
         summary="suspend execution (breakpoint)"),
    Inst("nanosleep", (slot("type", "u32"),), (op("t", "reg imm", "u32"),),
         requires=Requires(sm=70, ptx=(6, 3)), section=_MISC_SEC.format(2, "nanosleep"),
         sim="nanosleep", summary="sleep for about t nanoseconds"),
    Inst("pmevent", (slot("mask", "mask", optional=True,
                          requires={"mask": Requires(sm=20, ptx=(3, 0))}),),
         (op("a", "imm", "u32"),), requires=Requires(ptx=(1, 4)),
         section=_MISC_SEC.format(3, "pmevent"), sim="pmevent",
         summary="trigger performance-monitor events"),
    Inst("trap", section=_MISC_SEC.format(4, "trap"), sim="trap",
         summary="abort execution and interrupt the host"),
)
