"""Special registers (PTX ISA chapter "Special Registers"): name → type and
what the target needs. Vector registers list their components."""

from __future__ import annotations

import dataclasses

from ._targets import Requires

__all__ = ["SpecialReg", "SPECIAL_REGS"]


@dataclasses.dataclass(frozen=True)
class SpecialReg:
    """One special register such as ``%tid`` (components ``x y z``)."""

    name: str
    type: str
    components: tuple[str, ...] = ()
    requires: Requires = Requires()
    summary: str = ""


_XYZ = ("x", "y", "z")
_SM90 = Requires(sm=90, ptx=(7, 8))

SPECIAL_REGS: dict[str, SpecialReg] = {r.name: r for r in (
    SpecialReg("tid", "u32", _XYZ, summary="thread index within the CTA"),
    SpecialReg("ntid", "u32", _XYZ, summary="CTA shape"),
    SpecialReg("ctaid", "u32", _XYZ, summary="CTA index within the grid"),
    SpecialReg("nctaid", "u32", _XYZ, summary="grid shape"),
    SpecialReg("laneid", "u32", summary="lane within the warp"),
    SpecialReg("warpid", "u32", summary="warp within the CTA (may change; see ISA)"),
    SpecialReg("nwarpid", "u32", summary="maximum warp id"),
    SpecialReg("smid", "u32", summary="SM identifier"),
    SpecialReg("nsmid", "u32", summary="maximum SM identifier"),
    SpecialReg("gridid", "u64", summary="grid identifier"),
    SpecialReg("lanemask_eq", "u32", summary="bit of this lane"),
    SpecialReg("lanemask_le", "u32", summary="bits of lanes <= this one"),
    SpecialReg("lanemask_lt", "u32", summary="bits of lanes < this one"),
    SpecialReg("lanemask_ge", "u32", summary="bits of lanes >= this one"),
    SpecialReg("lanemask_gt", "u32", summary="bits of lanes > this one"),
    SpecialReg("clock", "u32", summary="32-bit cycle counter"),
    SpecialReg("clock64", "u64", summary="64-bit cycle counter"),
    SpecialReg("globaltimer", "u64", summary="nanosecond timer"),
    SpecialReg("dynamic_smem_size", "u32", requires=Requires(ptx=(4, 1)),
               summary="dynamic shared memory of the launch, in bytes"),
    SpecialReg("total_smem_size", "u32", requires=Requires(ptx=(4, 1)),
               summary="shared memory of the CTA, in bytes"),
    SpecialReg("cluster_ctaid", "u32", _XYZ, _SM90, "CTA index within the cluster"),
    SpecialReg("cluster_nctaid", "u32", _XYZ, _SM90, "cluster shape in CTAs"),
    SpecialReg("cluster_ctarank", "u32", (), _SM90, "CTA rank within the cluster"),
    SpecialReg("cluster_nctarank", "u32", (), _SM90, "CTAs in the cluster"),
    SpecialReg("clusterid", "u32", _XYZ, _SM90, "cluster index within the grid"),
    SpecialReg("nclusterid", "u32", _XYZ, _SM90, "grid shape in clusters"),
    SpecialReg("is_explicit_cluster", "pred", (), _SM90, "launched with explicit clusters"),
)}
