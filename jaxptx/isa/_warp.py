"""Instruction table entries: warp-level exchange, voting and reduction.

PTX ISA "Data Movement and Conversion Instructions: shfl.sync" and
"Parallel Synchronization and Communication Instructions": vote.sync,
match.sync, activemask, redux.sync, elect.sync.
"""

from __future__ import annotations

from ._schema import Inst, op, slot
from ._targets import Requires
from ._common import D, A, SM70_PTX60, SM80

PTX60 = Requires(sm=30, ptx=(6, 0))
# redux.sync on f32 (min/max only): sm_100a / sm_100f / sm_103a / sm_103f.
REDUX_F32 = Requires(ptx=(8, 6), only=("sm_100a", "sm_103a", "sm_100f", "sm_103f"))

MASK = op("membermask", "reg imm", "b32", example="0xffffffff")

_SYNC_SEC = "9.7.13 Parallel Synchronization and Communication Instructions"

ENTRIES: tuple[Inst, ...] = (
    Inst("shfl.sync", (slot("mode", "up down bfly idx"), slot("type", "b32")),
         (op("d", "reg pair", "$type", out=True), A, op("b", "reg imm", "u32"),
          op("c", "reg imm", "u32", example="0x1f"), MASK),
         requires=PTX60, section="9.7.9 Data Movement and Conversion Instructions: shfl.sync",
         sim="shfl_sync",
         summary="exchange a register between lanes; "
                 "d|p also writes whether the source lane was in range"),
    Inst("vote.sync", (slot("mode", "all any uni"), slot("type", "pred")),
         (op("d", "pred", out=True), op("a", "pred imm", neg=True), MASK),
         requires=PTX60, section=f"{_SYNC_SEC}: vote.sync", sim="vote_sync",
         summary="whether a predicate holds in all / any / uniformly over the participating lanes"),
    Inst("vote.sync", (slot("mode", "ballot"), slot("type", "b32")),
         (op("d", "reg", "$type", out=True), op("a", "pred", neg=True), MASK),
         requires=PTX60, section=f"{_SYNC_SEC}: vote.sync", sim="vote_sync",
         summary="bit mask of the participating lanes whose predicate holds"),
    Inst("match.any.sync", (slot("type", "b32 b64"),),
         (op("d", "reg", "b32", out=True), A, MASK),
         requires=SM70_PTX60, section=f"{_SYNC_SEC}: match.sync", sim="match_any_sync",
         summary="mask of the lanes holding the same value of a as this lane"),
    Inst("match.all.sync", (slot("type", "b32 b64"),),
         (op("d", "reg pair", "b32", out=True), A, MASK),
         requires=SM70_PTX60, section=f"{_SYNC_SEC}: match.sync", sim="match_all_sync",
         summary="membermask if all lanes hold the same value of a, else 0; "
                 "d|p also writes whether they do"),
    Inst("activemask", (slot("type", "b32"),), (op("d", "reg", "$type", out=True),),
         requires=Requires(sm=30, ptx=(6, 2)), section=f"{_SYNC_SEC}: activemask",
         sim="activemask", summary="mask of the currently active lanes of the warp"),
    Inst("redux.sync", (slot("op", "add min max"), slot("type", "u32 s32")),
         (D, A, MASK), requires=SM80, section=f"{_SYNC_SEC}: redux.sync", sim="redux_sync",
         summary="integer reduction across the participating lanes"),
    Inst("redux.sync", (slot("op", "and or xor"), slot("type", "b32")),
         (D, A, MASK), requires=SM80, section=f"{_SYNC_SEC}: redux.sync", sim="redux_sync",
         summary="bitwise reduction across the participating lanes"),
    Inst("redux.sync", (slot("op", "min max"), slot("abs", "abs", optional=True),
                        slot("nan", "NaN", optional=True), slot("type", "f32")),
         (D, A, MASK), requires=REDUX_F32, section=f"{_SYNC_SEC}: redux.sync",
         sim="redux_sync", summary="f32 minimum / maximum across the participating lanes"),
    Inst("elect.sync", (), (op("d", "pair", "u32", out=True), MASK),
         requires=Requires(sm=90, ptx=(8, 0)), section=f"{_SYNC_SEC}: elect.sync",
         sim="elect_sync",
         summary="elect one leader lane: d gets its lane id, p is true in the leader only"),
)
