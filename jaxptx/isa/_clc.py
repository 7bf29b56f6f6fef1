"""Instruction table entries: cluster launch control (``clusterlaunchcontrol``).

PTX ISA section "Parallel Synchronization and Communication Instructions:
clusterlaunchcontrol.try_cancel / clusterlaunchcontrol.query_cancel" (PTX
ISA 8.6, sm_100 and newer). ``try_cancel`` asks to cancel the launch of a
cluster that has not started yet and writes an opaque 16-byte response to
shared memory, completing the mbarrier's tx-count by the bytes written;
``query_cancel`` decodes a response held in a ``.b128`` register: whether
the cancel succeeded, and the ``%ctaid`` of the canceled cluster's first CTA
(one coordinate, or all three as a ``.v4`` vector whose fourth element is
usually ``_``).

Target facts checked with ptxas 13.5: the family needs sm_100 or newer
(any suffix) and PTX 8.6; ``.multicast::cluster::all`` exists only on the
arch- and family-specific targets of sm_100, sm_103, sm_110, sm_120 and
sm_121 (ptxas: "Feature '.multicast::cluster::all' not supported on
.target 'sm_100'"); without ``.shared::cta`` both addresses are generic;
ptxas spells the ``.v4`` destination "Vector of size 4 is expected".
"""

from __future__ import annotations

from ._schema import Inst, op, slot
from ._targets import Requires

_SEC = "9.7.13 Parallel Synchronization and Communication Instructions: "
CLC = Requires(sm=100, ptx=(8, 6))
MULTICAST_TARGETS = ("sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a",
                     "sm_100f", "sm_103f", "sm_110f", "sm_120f", "sm_121f")
_MULTICAST = Requires(sm=100, ptx=(8, 6), only=MULTICAST_TARGETS)

_RESPONSE = op("try_cancel_response", "reg", "b128")
_B128 = slot("rtype", "b128")

ENTRIES: tuple[Inst, ...] = (
    Inst("clusterlaunchcontrol.try_cancel",
         (slot("async", "async"), slot("space", "shared::cta", optional=True),
          slot("completion", "mbarrier::complete_tx::bytes"),
          slot("multicast", "multicast::cluster::all", optional=True,
               requires={"multicast::cluster::all": _MULTICAST}),
          slot("type", "b128")),
         (op("addr", "mem"), op("mbar", "mem")), requires=CLC,
         section=_SEC + "clusterlaunchcontrol.try_cancel", sim="clusterlaunchcontrol_try_cancel",
         summary="cancel the launch of a cluster that has not started; write the 16-byte response "
                 "to [addr] (every CTA of the cluster with .multicast::cluster::all) and complete "
                 "16 tx bytes on [mbar]"),
    Inst("clusterlaunchcontrol.query_cancel",
         (slot("query", "is_canceled"), slot("type", "pred"), _B128),
         (op("pred", "pred", "pred", out=True), _RESPONSE), requires=CLC,
         section=_SEC + "clusterlaunchcontrol.query_cancel", sim="clusterlaunchcontrol_query_cancel",
         summary="whether a try_cancel response reports a canceled cluster"),
    Inst("clusterlaunchcontrol.query_cancel",
         (slot("query", "get_first_ctaid::x get_first_ctaid::y get_first_ctaid::z"),
          slot("type", "b32"), _B128),
         (op("d", "reg", "b32", out=True), _RESPONSE), requires=CLC,
         section=_SEC + "clusterlaunchcontrol.query_cancel", sim="clusterlaunchcontrol_query_cancel",
         summary="one %ctaid coordinate of the first CTA of the canceled cluster"),
    Inst("clusterlaunchcontrol.query_cancel",
         (slot("query", "get_first_ctaid"), slot("vec", "v4"), slot("type", "b32"), _B128),
         (op("d", "vec", "b32", out=True, count=4), _RESPONSE), requires=CLC,
         section=_SEC + "clusterlaunchcontrol.query_cancel", sim="clusterlaunchcontrol_query_cancel",
         summary="the %ctaid (x, y, z, and a fourth element) of the first CTA of the canceled cluster"),
)
