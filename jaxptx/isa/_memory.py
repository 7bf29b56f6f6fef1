"""Instruction table entries: loads, stores, prefetches and atomics.

PTX ISA sections "Data Movement and Conversion Instructions" (``ld``,
``ld.global.nc``, ``ldu``, ``st``, ``prefetch``) and "Parallel
Synchronization and Communication Instructions" (``atom``, ``red``).

Each ``ld``/``st`` syntax line becomes three forms: a scalar one (register
operand), a ``.v2``/``.v4`` one of at most 128 bits (vector operand) and a
256-bit one (``.v8`` of 32-bit or ``.v4`` of 64-bit values, ``.global``
only, sm_100), which is the only place ``.L2::evict_*`` is allowed.
"""

from __future__ import annotations

from ._schema import Inst, Rule, Slot, op, slot
from ._targets import Requires
from ._common import SM70_PTX60, SM90_PTX78, SM90_PTX83

LD_TYPES = "b8 b16 b32 b64 b128 u8 u16 u32 u64 s8 s16 s32 s64 f32 f64"
VEC_TYPES = "b8 b16 b32 b64 u8 u16 u32 u64 s8 s16 s32 s64 f32 f64"
UPTO32 = ("b8", "b16", "b32", "u8", "u16", "u32", "s8", "s16", "s32", "f32")
WIDE32 = ("b32", "u32", "s32", "f32")
WIDE64 = ("b64", "u64", "s64", "f64")
SHARED = ("shared", "shared::cta", "shared::cluster")
L1_EVICT = "L1::evict_normal L1::evict_unchanged L1::evict_first L1::evict_last L1::no_allocate"
L2_EVICT = "L2::evict_normal L2::evict_first L2::evict_last"
PREFETCH = "L2::64B L2::128B L2::256B"
SCOPES = "cta cluster gpu sys"
ATOM_SPACES = "global shared shared::cta shared::cluster"

SM70_PTX74 = Requires(sm=70, ptx=(7, 4))
SM75_PTX74 = Requires(sm=75, ptx=(7, 4))
SM80_PTX74 = Requires(sm=80, ptx=(7, 4))
# .b128 with .sys scope arrived a version after .b128 itself; only the mmio
# forms, whose scope is always .sys, can say so.
B128_SYS = Requires(sm=70, ptx=(8, 4))

# Requirements of modifier values, wherever they appear in this family.
_REQ: dict[str, Requires] = {
    "weak": SM70_PTX60, "relaxed": SM70_PTX60, "acquire": SM70_PTX60,
    "release": SM70_PTX60, "acq_rel": SM70_PTX60,
    "cta": Requires(sm=60, ptx=(5, 0)), "gpu": Requires(sm=60, ptx=(5, 0)),
    "sys": Requires(sm=60, ptx=(5, 0)), "cluster": SM90_PTX78,
    "shared::cta": Requires(ptx=(7, 8)), "shared::cluster": SM90_PTX78,
    "param::entry": Requires(ptx=(8, 3)), "param::func": Requires(ptx=(8, 3)),
    **{v: SM70_PTX74 for v in L1_EVICT.split()},
    "L2::cache_hint": SM80_PTX74,
    "L2::64B": SM75_PTX74, "L2::128B": SM75_PTX74, "L2::256B": SM80_PTX74,
    "L2::evict_normal": SM80_PTX74, "L2::evict_first": SM80_PTX74, "L2::evict_last": SM80_PTX74,
    "b128": Requires(sm=70, ptx=(8, 3)),
}


def _slot(name: str, values: str, optional: bool = False,
          extra: dict[str, Requires] | None = None) -> Slot:
    """A slot carrying this family's per-value requirements (``extra`` wins)."""
    reqs = {v: _REQ[v] for v in values.split() if v in _REQ}
    reqs.update(extra or {})
    return slot(name, values, optional=optional, requires=reqs)


ADDR = op("a", "mem")
POLICY = op("cache_policy", "reg", "u64", when="hint")
LD_D = op("d", "reg", "$type", out=True, widen=True)
LD_DV = op("d", "vec", "$type", out=True, count="$vec", widen=True)
ST_B = op("b", "reg imm", "$type", widen=True)
ST_BV = op("b", "vec", "$type", count="$vec", widen=True)

_LD_SEC = "9.7.9.8 Data Movement and Conversion Instructions: ld"
_NC_SEC = "9.7.9.9 Data Movement and Conversion Instructions: ld.global.nc"
_LDU_SEC = "9.7.9.10 Data Movement and Conversion Instructions: ldu"
_ST_SEC = "9.7.9.11 Data Movement and Conversion Instructions: st"
_PF_SEC = "9.7.9.15 Data Movement and Conversion Instructions: prefetch, prefetchu"
_ATOM_SEC = "9.7.13.5 Parallel Synchronization and Communication Instructions: atom"
_RED_SEC = "9.7.13.6 Parallel Synchronization and Communication Instructions: red"


def _cache_slots(cop: str | None, nc: bool, evict: bool, hint: bool, prefetch: bool,
                 wide: bool) -> tuple[Slot, ...]:
    """The caching modifiers between the state space and ``.vec``."""
    out = []
    if cop:
        out.append(_slot("cop", cop, optional=True))
    if nc:
        out.append(_slot("nc", "nc"))
    if evict:
        out.append(_slot("evict1", L1_EVICT, optional=True))
        if wide:
            out.append(_slot("evict2", L2_EVICT, optional=True))
    if hint:
        out.append(_slot("hint", "L2::cache_hint", optional=True))
    if prefetch:
        out.append(_slot("prefetch", PREFETCH, optional=True))
    return tuple(out)


def _cache_rules(names: set[str], spaces: str) -> tuple[Rule, ...]:
    """L1 eviction priorities exclude cache operators (the L2 ones of the
    256-bit forms combine with them, as ptxas 13 accepts); caching hints
    apply to global memory only."""
    rules = [Rule("cop", "evict1", absent=True)] if {"cop", "evict1"} <= names else []
    local = tuple(s for s in spaces.split() if s != "global")
    if local:
        rules += [Rule("space", h, local, absent=True)
                  for h in ("evict1", "hint", "prefetch") if h in names]
    return tuple(rules)


def _sized(opcode: str, head: tuple[Slot, ...], spaces: str, cop: str | None, *, store: bool,
           evict: bool, hint: bool, prefetch: bool, requires: Requires, section: str,
           sim: str, summary: str, nc: bool = False) -> tuple[Inst, ...]:
    """Scalar, vector (<= 128 bits) and 256-bit vector forms of one ld/st line.

    ``nc`` makes it ``ld.global{.cop}.nc...``: the space is then required.
    """
    out = []
    for shape in ("scalar", "vector", "wide"):
        wide = shape == "wide"
        space = _slot("space", "global" if wide else spaces, optional=not nc)
        cache = _cache_slots(cop, nc, evict, hint, prefetch, wide)
        names = {s.name for s in cache}
        rules = _cache_rules(names, " ".join(space.values))
        if shape == "scalar":
            tail = (_slot("type", LD_TYPES),)
        elif shape == "vector":
            tail = (_slot("vec", "v2 v4"), _slot("type", VEC_TYPES))
            rules += (Rule("vec", "type", ("v4",), UPTO32),)
        else:
            tail = (_slot("vec", "v4 v8"), _slot("type", " ".join(WIDE32 + WIDE64)))
            rules += (Rule("vec", "type", ("v8",), WIDE32), Rule("vec", "type", ("v4",), WIDE64))
        vector = shape != "scalar"
        if store:
            operands = (ADDR, ST_BV if vector else ST_B)
        else:
            operands = (LD_DV if vector else LD_D, ADDR)
        if hint:
            operands += (POLICY,)
        req = (Requires(sm=max(requires.sm, 100), ptx=max(requires.ptx, (8, 8)))
               if wide else requires)
        note = {"scalar": "", "vector": ", vector", "wide": ", 256-bit vector"}[shape]
        out.append(Inst(opcode, (*head, space, *cache, *tail), operands, requires=req,
                        rules=rules, section=section, sim=sim, summary=summary + note))
    return tuple(out)


def _ld_st(opcode: str, store: bool) -> tuple[Inst, ...]:
    """Every ``ld`` or ``st`` form except ``ld.global.nc`` and ``st.param``."""
    spaces = " ".join((("global", "local") if store else
                       ("const", "global", "local", "param", "param::entry"))
                      + SHARED)
    cop = "wb cg cs wt" if store else "ca cg cs lu cv"
    ordered = "relaxed release" if store else "relaxed acquire"
    sec, sim = (_ST_SEC, "st") if store else (_LD_SEC, "ld")
    verb = "store to" if store else "load from"
    sync_spaces = "global " + " ".join(SHARED)
    return (
        *_sized(opcode, (_slot("weak", "weak", optional=True),), spaces, cop, store=store,
                evict=True, hint=True, prefetch=not store, requires=Requires(),
                section=sec, sim=sim, summary=f"{verb} memory"),
        *_sized(opcode, (_slot("sem", "volatile"),), sync_spaces, None, store=store,
                evict=False, hint=False, prefetch=not store, requires=Requires(ptx=(1, 1)),
                section=sec, sim=sim, summary=f"volatile {verb} memory"),
        *_sized(opcode, (_slot("sem", ordered), _slot("scope", SCOPES)), sync_spaces, None,
                store=store, evict=True, hint=True, prefetch=not store, requires=SM70_PTX60,
                section=sec, sim=sim, summary=f"{ordered.replace(' ', ' or ')} {verb} memory"),
        Inst(opcode, (_slot("mmio", "mmio"), _slot("sem", "relaxed"), _slot("scope", "sys"),
                      _slot("space", "global", optional=True),
                      _slot("type", LD_TYPES, extra={"b128": B128_SYS})),
             (ADDR, ST_B) if store else (LD_D, ADDR), requires=Requires(sm=70, ptx=(8, 2)),
             section=sec, sim=sim, summary=f"memory-mapped I/O {verb} memory"),
    )


def _st_param() -> tuple[Inst, ...]:
    # ptxas cannot assemble st.param through a register address, so these
    # forms carry an example that declares the .param variable it stores to.
    head = (_slot("space", "param param::func"),)
    return (
        Inst("st", (*head, _slot("type", LD_TYPES)), (ADDR, ST_B),
             section=_ST_SEC, sim="st", summary="store to a parameter",
             example=".param .b32 stp0; st.param.b32 [stp0], 1;"),
        Inst("st", (*head, _slot("vec", "v2 v4"), _slot("type", VEC_TYPES)), (ADDR, ST_BV),
             rules=(Rule("vec", "type", ("v4",), UPTO32),),
             section=_ST_SEC, sim="st", summary="store a vector to a parameter",
             example=".param .align 8 .b8 stp0[8]; st.param.v2.b32 [stp0], {1, 2};"),
    )


def _ld_param_func() -> tuple[Inst, ...]:
    # ld.param::func reads what a call returned into a .param variable;
    # ptxas 13.1 and later accept it only there (not through a register
    # address), so these forms carry an example with the call.
    head = (_slot("space", "param::func"),)
    call = (".reg .u64 %callfp0; mov.u64 %callfp0, 0; .param {decl}; callpt0: .callprototype "
            "(.param {proto}) _ (); call (r0), %callfp0, callpt0; ")
    return (
        Inst("ld", (*head, _slot("type", LD_TYPES)), (LD_D, ADDR),
             section=_LD_SEC, sim="ld", summary="load a value a call returned",
             example=call.format(decl=".b32 r0", proto=".b32 _") + "ld.param::func.b32 %{b32}, [r0];"),
        Inst("ld", (*head, _slot("vec", "v2 v4"), _slot("type", VEC_TYPES)), (LD_DV, ADDR),
             rules=(Rule("vec", "type", ("v4",), UPTO32),),
             section=_LD_SEC, sim="ld", summary="load a vector a call returned",
             example=call.format(decl=".align 8 .b8 r0[8]", proto=".align 8 .b8 _[8]")
             + "ld.param::func.v2.b32 {%{b32}, %{b32}}, [r0];"),
    )


def _atomic(opcode: str, with_result: bool) -> tuple[Inst, ...]:
    """Scalar and vector forms of ``atom`` (``with_result``) or ``red``."""
    sems = "relaxed acquire release acq_rel" if with_result else "relaxed release"
    head = (_slot("sem", sems, optional=True), _slot("scope", SCOPES, optional=True))
    space = _slot("space", ATOM_SPACES, optional=True)
    gspace = _slot("space", "global", optional=True)
    hint = _slot("hint", "L2::cache_hint", optional=True)
    no_shared_hint = Rule("space", "hint", SHARED, absent=True)
    d, dv = op("d", "reg", "$type", out=True), op("d", "vec", "$type", out=True, count="$vec")
    b, bv = op("b", "reg imm", "$type"), op("b", "vec", "$type", count="$vec")
    lead = (d, ADDR) if with_result else (ADDR,)
    lead_v = (dv, ADDR) if with_result else (ADDR,)
    sec = _ATOM_SEC if with_result else _RED_SEC
    what = "atomic" if with_result else "reduction"
    bits_ops = "and or xor exch" if with_result else "and or xor"
    ops = bits_ops + " add inc dec min max"
    types = ("b32 b64 b128 " if with_result else "b32 b64 ") + "u32 s32 u64 s64 f32 f64"
    rules = (
        Rule("op", "type", ("and", "or", "xor"), ("b32", "b64")),
        Rule("op", "type", ("exch",), ("b32", "b64", "b128")),
        Rule("op", "type", ("add",), ("u32", "s32", "u64", "f32", "f64")),
        Rule("op", "type", ("inc", "dec"), ("u32",)),
        Rule("op", "type", ("min", "max"), ("u32", "s32", "u64", "s64")),
        no_shared_hint,
    )
    scalar_types = {"b128": SM90_PTX83, "f64": Requires(sm=60, ptx=(5, 0))}
    half = {"f16": Requires(sm=70, ptx=(6, 3)), "f16x2": Requires(sm=60, ptx=(6, 2)),
            "bf16": SM90_PTX78, "bf16x2": SM90_PTX78}
    forms = [
        Inst(opcode, (*head, space, _slot("op", ops), hint,
                      _slot("type", types, extra=scalar_types)),
             (*lead, b, POLICY), rules=rules, section=sec, sim=opcode,
             summary=f"{what} bitwise, integer or floating-point operation"),
        Inst(opcode, (*head, space, _slot("op", "add"), _slot("noftz", "noftz"), hint,
                      _slot("type", "f16 f16x2 bf16 bf16x2", extra=half)),
             (*lead, b, POLICY), rules=(no_shared_hint,), requires=Requires(sm=60, ptx=(6, 2)),
             section=sec, sim=opcode, summary=f"{what} half-precision add"),
        Inst(opcode, (*head, gspace, _slot("op", "add"), hint, _slot("vec", "v2 v4"),
                      _slot("type", "f32")),
             (*lead_v, bv, POLICY), requires=Requires(sm=90, ptx=(8, 1)),
             section=sec, sim=opcode, summary=f"{what} add on a vector of f32"),
        Inst(opcode, (*head, gspace, _slot("op", "add min max"), _slot("noftz", "noftz"), hint,
                      _slot("vec", "v2 v4 v8"), _slot("type", "f16 bf16 f16x2 bf16x2")),
             (*lead_v, bv, POLICY), rules=(Rule("vec", "type", ("v8",), ("f16", "bf16")),),
             requires=Requires(sm=90, ptx=(8, 1)),
             section=sec, sim=opcode, summary=f"{what} operation on a vector of halves"),
    ]
    if with_result:
        forms.append(Inst(opcode, (*head, space, _slot("op", "cas"),
                                   _slot("type", "b16 b32 b64 b128",
                                         extra={"b16": Requires(sm=70, ptx=(6, 3)),
                                                "b128": SM90_PTX83})),
                          (d, ADDR, b, op("c", "reg imm", "$type")),
                          section=sec, sim="atom_cas", summary="atomic compare-and-swap"))
    return tuple(forms)


_PRIMARY = "L2::evict_last L2::evict_normal L2::evict_first L2::evict_unchanged"
_SECONDARY = "L2::evict_first L2::evict_unchanged"
_POLICY_SEC = "9.7.9.18 Data Movement and Conversion Instructions: createpolicy"
_POLICY_OUT = op("policy", "reg", "b64", out=True)
_CREATEPOLICY = (
    Inst("createpolicy", (slot("mode", "fractional"), slot("primary", _PRIMARY),
                          slot("secondary", _SECONDARY, optional=True), slot("type", "b64")),
         (_POLICY_OUT, op("fraction", "imm reg", "f32", optional=True, example="0.5")),
         requires=SM80_PTX74, section=_POLICY_SEC, sim="createpolicy",
         summary="make an L2 cache policy covering a fraction of accesses"),
    Inst("createpolicy", (slot("mode", "range"), slot("space", "global", optional=True),
                          slot("primary", _PRIMARY), slot("secondary", _SECONDARY, optional=True),
                          slot("type", "b64")),
         (_POLICY_OUT, ADDR, op("primary_size", "reg imm", "u32"), op("total_size", "reg imm", "u32")),
         requires=SM80_PTX74, section=_POLICY_SEC, sim="createpolicy",
         summary="make an L2 cache policy for an address range"),
    Inst("createpolicy.cvt", (slot("level", "L2"), slot("type", "b64")),
         (_POLICY_OUT, op("a", "reg", "b64")),
         requires=SM80_PTX74, section=_POLICY_SEC, sim="createpolicy",
         summary="convert a CUDA access-property policy to an L2 cache policy"),
)

ENTRIES: tuple[Inst, ...] = (
    *_ld_st("ld", store=False),
    *_sized("ld", (), "global", "ca cg cs", store=False, evict=True, hint=True, prefetch=True,
            requires=Requires(sm=32, ptx=(3, 1)), section=_NC_SEC, sim="ld",
            summary="load via the non-coherent cache", nc=True),
    *_ld_st("st", store=True),
    *_st_param(),
    *_ld_param_func(),
    Inst("ldu", (_slot("space", "global", optional=True), _slot("type", LD_TYPES)), (LD_D, ADDR),
         section=_LDU_SEC, sim="ld", summary="load a warp-uniform read-only value"),
    Inst("ldu", (_slot("space", "global", optional=True), _slot("vec", "v2 v4"),
                 _slot("type", VEC_TYPES)), (LD_DV, ADDR),
         rules=(Rule("vec", "type", ("v4",), UPTO32),),
         section=_LDU_SEC, sim="ld", summary="load a warp-uniform read-only vector"),
    Inst("prefetch", (_slot("space", "global local", optional=True), _slot("level", "L1 L2")),
         (ADDR,), section=_PF_SEC, sim="prefetch", summary="prefetch a line into a cache level"),
    Inst("prefetch", (_slot("space", "global"), _slot("level", "L2::evict_last L2::evict_normal")),
         (ADDR,), requires=SM80_PTX74, section=_PF_SEC, sim="prefetch",
         summary="prefetch a line into L2 with an eviction priority"),
    Inst("prefetch", (_slot("space", "const param", optional=True), _slot("level", "tensormap")),
         (ADDR,), requires=Requires(sm=90, ptx=(8, 0)), section=_PF_SEC, sim="prefetch",
         summary="prefetch a tensor map"),
    Inst("prefetchu", (_slot("level", "L1"),), (ADDR,), section=_PF_SEC, sim="prefetch",
         summary="prefetch a line into the uniform cache"),
    *_atomic("atom", with_result=True),
    *_atomic("red", with_result=False),
    *_CREATEPOLICY,
)
