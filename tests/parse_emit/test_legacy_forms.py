"""Legacy module-level initialisers: the fields of ``.samplerref``/``.texref``/
``.surfref`` variables (``{ addr_mode_0 = clamp_to_border, filter_mode =
nearest }``, under ``.target ..., texmode_independent``) and ``generic(g)``
addresses in address lists (``{generic(g), generic(g)+4}``). Each module
round-trips byte for byte with its spacing, its initialisers are values in
the IR (``ir.Field``, ``ir.Generic``; not text), the canonical emission is a
fixed point, and ptxas accepts both texts. ``jaxptx.check`` refuses the
initialisers ptxas refuses, each with its message."""

from __future__ import annotations

import re

import pytest

import jaxptx
from jaxptx import ir
from jaxptx.errors import ParseError, PtxasError
from jaxptx.runtime import ptxas

_KERNEL = """
.visible .entry k()
{
	ret;
}
"""

SAMPLERS = """.version 7.0
.target sm_75, texmode_independent
.address_size 64

.global .samplerref s = { addr_mode_0 = clamp_to_border, filter_mode = nearest };
.global .samplerref  s_wrap={addr_mode_0=wrap,
                             addr_mode_1 = mirror ,  /* why */ filter_mode = linear,
                             force_unnormalized_coords = 1};   // trailing
.global .samplerref s_pair[2] = { { filter_mode = nearest }, { filter_mode = linear } };
.global .texref t = { width = 0x40, height = 8*2, normalized_coords = -1, addr_mode_2 = clamp_ogl };
.global .texref t_empty = {};
.visible .global .surfref su = { width = 16, channel_order = 1 };
""" + _KERNEL

GENERIC = """.version 7.0
.target sm_75
.address_size 64

.global .align 4 .u32 g[4] = {1, 2, 3, 4};
.const .align 1 .b8 $str[3] = {104, 105, 0};
.global .align 8 .u64 p[2] = {generic(g), generic(g)+4};
.global .align 8 .u64 q[5] = {generic($str), generic ( g ) + ( 2*2 ),generic(g)+-4, g+8, 0};
.const .u64 c_p = generic(g);
.global .u32 p32 = generic(g)+0x10;
""" + _KERNEL

MODULES = {"samplers": SAMPLERS, "generic": GENERIC}


def _decl(module: ir.Module, name: str) -> ir.VarDecl:
    return next(i for i in module.items if isinstance(i, ir.VarDecl) and i.name == name)


@pytest.mark.parametrize("name", MODULES)
def test_the_module_round_trips_byte_for_byte(name):
    assert jaxptx.emit(jaxptx.parse(MODULES[name])) == MODULES[name]


def test_sampler_texture_and_surface_fields_are_values_in_the_ir():
    m = jaxptx.parse(SAMPLERS)
    s = _decl(m, "s")
    assert (s.type, s.init_braced) == ("samplerref", True)
    assert s.init == (ir.Field("addr_mode_0", "clamp_to_border"), ir.Field("filter_mode", "nearest"))
    assert [(f.name, f.value if isinstance(f.value, str) else f.value.value)
            for f in _decl(m, "s_wrap").init] == [("addr_mode_0", "wrap"), ("addr_mode_1", "mirror"),
                                                   ("filter_mode", "linear"), ("force_unnormalized_coords", 1)]
    assert _decl(m, "s_pair").init == (ir.Vector((ir.Field("filter_mode", "nearest"),)),
                                       ir.Vector((ir.Field("filter_mode", "linear"),)))
    t = _decl(m, "t").init
    assert [f.value.value for f in t[:3]] == [64, 16, -1]
    assert (t[0].value.form, t[1].value.expr) == ("hex", ("8", "*", "2"))
    assert t[3] == ir.Field("addr_mode_2", "clamp_ogl")
    assert (_decl(m, "t_empty").init, _decl(m, "t_empty").init_braced) == ((), True)
    assert _decl(m, "su").linkage == ("visible",)


def test_generic_addresses_are_values_in_the_ir():
    m = jaxptx.parse(GENERIC)
    assert _decl(m, "p").init == (ir.Generic("g"), ir.Generic("g", 4))
    q = _decl(m, "q").init
    assert q[0] == ir.Generic("$str")
    assert (q[1].name, q[1].offset.value, q[1].offset.expr) == ("g", 4, ("(", "2", "*", "2", ")"))
    assert q[2:] == (ir.Generic("g", -4), ir.Symbol("g", 8), ir.Immediate(0))
    assert _decl(m, "c_p").init == (ir.Generic("g"),) and not _decl(m, "c_p").init_braced
    p32 = _decl(m, "p32").init[0]
    assert (p32.name, p32.offset.value, p32.offset.form) == ("g", 16, "hex")
    # generic(g) refers to g, as an address operand would.
    assert list(ir.leaves(ir.Generic("g", 4))) == [ir.Symbol("g"), 4]


@pytest.mark.parametrize("name", MODULES)
def test_the_canonical_text_is_a_fixed_point_and_check_finds_nothing(name):
    canonical = jaxptx.emit(jaxptx.parse(MODULES[name]), style="canonical")
    again = jaxptx.parse(canonical)
    assert jaxptx.emit(again, style="canonical") == canonical
    # The same values, a constant expression folded (an offset reads back as a number).
    assert again.items == jaxptx.parse(MODULES[name].replace("( 2*2 )", "4")).items
    assert jaxptx.check(again) == []


def test_the_canonical_spelling():
    canonical = "".join(jaxptx.emit(jaxptx.parse(text), style="canonical") for text in MODULES.values())
    assert ".global .samplerref s = {addr_mode_0 = clamp_to_border, filter_mode = nearest};\n" in canonical
    assert ".global .samplerref s_pair[2] = {{filter_mode = nearest}, {filter_mode = linear}};\n" in canonical
    assert ".global .texref t = {width = 0x40, height = 16, normalized_coords = -1, " \
           "addr_mode_2 = clamp_ogl};\n" in canonical
    assert ".global .texref t_empty = {};\n" in canonical
    assert ".global .align 8 .u64 q[5] = {generic($str), generic(g) + 4, generic(g) + -4, g + 8, 0};\n" \
        in canonical


@pytest.mark.parametrize("name", MODULES)
def test_ptxas_accepts_the_source_and_the_canonical_text(name):
    ptxas(MODULES[name], "sm_75")
    ptxas(jaxptx.emit(jaxptx.parse(MODULES[name]), style="canonical"), "sm_75")


# Initialisers ptxas 13 refuses (its message), and what jaxptx.check says.
_HEAD = ".version 7.0\n.target sm_75, texmode_independent\n.address_size 64\n"
BAD = [
    (".global .u64 p = generic(g);\n.global .u32 g;", "Invalid initial value expression",
     r"4:1: error: p: initialiser generic\(g\): generic\(\) takes a .global or .const variable declared "
     r"before it; g is not declared before it"),
    (".shared .u32 sh;\n.global .u64 p = generic(sh);", "not in .global or .const state space",
     r"5:1: error: p: initialiser generic\(sh\): .* sh is a .shared variable"),
    (".global .u32 g;\n.global .s64 p = generic(g);", "Initial value type mismatch",
     r"5:1: error: p: initialiser generic\(g\): generic\(\) initialises a .u32 or .u64 variable, not .s64"),
    (".global .u32 p = { filter_mode = nearest };", "Initial value type mismatch",
     r"4:1: error: p: initialiser filter_mode=nearest: fields initialise a .texref, .samplerref or "
     r".surfref variable, not .u32"),
    (".global .samplerref s = 1;", "Initial value type mismatch",
     r"4:1: error: s: a .samplerref initialiser names its fields \(\{field = value, ...\}\), got 1"),
    (".global .samplerref s = { normalized_coords = 1 };", "Unrecognized field name 'normalized_coords'",
     r"4:1: error: s: .samplerref has no field normalized_coords; it has addr_mode_0, addr_mode_1, "
     r"addr_mode_2, filter_mode, force_unnormalized_coords"),
    (".global .surfref s[2] = { { width = 4 }, { filter_mode = linear } };", "Unrecognized field name",
     r"4:1: error: s: .surfref has no field filter_mode; it has channel_data_type, channel_order, depth, "
     r"height, width"),
]


@pytest.mark.parametrize("decls, ptxas_says, check_says", BAD, ids=[b[1][:30] for b in BAD])
def test_check_refuses_the_initialisers_ptxas_refuses(decls, ptxas_says, check_says):
    text = _HEAD + decls + "\n" + _KERNEL
    with pytest.raises(PtxasError, match=ptxas_says):
        ptxas(text, "sm_75")
    found = [str(d) for d in jaxptx.check(text)]
    assert len(found) == 1 and re.fullmatch(check_says, found[0]), found


def test_a_sampler_needs_texmode_independent_for_ptxas():
    # The target decides (ptxas: "violates .target texmode_unified setting"); the parser reads both alike.
    unified = SAMPLERS.replace(", texmode_independent", "")
    with pytest.raises(PtxasError, match="texmode_unified"):
        ptxas(unified, "sm_75")
    assert jaxptx.emit(jaxptx.parse(unified)) == unified


@pytest.mark.parametrize("decl, message", [
    (".global .u64 p = generic(g)-4;", r"5:28: generic\(g\) takes a '\+' offset only \(ptxas: syntax error "
                                      r"at '-'\); write generic\(g\)\+-N"),
    (".global .u64 p = generic(4);", r"5:26: expected a variable name in generic\(...\), got '4'"),
    (".global .texref t = { width = %r1 };", r"5:31: expected a number or a name as the value of field "
                                             r"width, got '%r1'"),
    (".global .texref t = { width = };", r"5:31: expected an operand, got '}'"),
])
def test_malformed_initialisers_are_parse_errors(decl, message):
    with pytest.raises(ParseError, match=message):
        jaxptx.parse(_HEAD + ".global .u32 g;\n" + decl + "\n")
