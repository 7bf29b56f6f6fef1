"""``ptx.printf``: device printf, written as nvcc writes CUDA's ``printf``.

One call emits, in the current function::

    // module level, once: the prototype, and the format as a global string
    .extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
    .global .align 1 .b8 $str[N] = {...};
    // function: one argument buffer in local memory (sized for the largest call)
    .local .align 8 .b8 __printf_depot[M];
    st.local.b32 [__printf_depot+0], %r1;          // each argument at its offset
    st.local.f64 [__printf_depot+8], %fd1;         // a float promoted to double
    mov.u64 %rd1, $str;  cvta.global.u64 %rd2, %rd1;
    { .param .b64 param0; st.param.b64 [param0], %rd2;
      .param .b64 param1; st.param.b64 [param1], %rd4;   // cvta.local of the depot
      .param .b32 retval0;
      call.uni (retval0), vprintf, (param0, param1);
      ld.param.b32 %r2, [retval0]; }

The buffer layout is :mod:`jaxptx._vprintf`'s, which the emulator reads.
"""

from __future__ import annotations

from typing import Any

from .. import ir
from .._vprintf import Conversion, layout, parse_format, plan
from ..errors import TraceError
from ..types import TYPES, PtxType
from ._core import Reg, emit_instruction, new_reg
from ._module import block, declare
from ._trace import current, user_location, with_location

__all__ = ["printf"]

_DEPOT = "__printf_depot"


def printf(fmt: str, *args: Any) -> Reg:
    """Print from every executing thread, as CUDA's ``printf`` does.

    Emits nvcc's sequence: the ``vprintf`` prototype (once per module), the
    format as a module global string, the arguments stored to a local
    buffer as C promotes them, and ``call.uni (retval0), vprintf, (param0,
    param1)``. On a GPU the text reaches the host's stdout at the next
    synchronisation; on the emulator when the call runs.

    Example:
        ``ptx.printf("block %d thread %d x = %f\\n", ptx.special.ctaid.x(), ptx.special.tid.x(), x)``

    Args:
        fmt: the format (UTF-8), with CUDA printf's conversions: ``d i u x
            X o c`` (a 32-bit integer register or Python int; 8-, 16-bit
            registers are promoted; with ``l``/``ll`` a 64-bit one, 32-bit
            registers widened by their signedness), ``f F e E g G a A`` (an
            ``f32``/``f16`` register, converted to ``f64``, an ``f64``
            register, or a Python float), ``s`` (a Python str, stored as
            another global string, or a 64-bit register holding a generic
            address), ``p`` (a 64-bit register); a ``*`` width takes a
            32-bit integer first.
        *args: one value per argument the format reads.

    Returns:
        The ``.s32`` register ``vprintf`` returns (the number of arguments
        parsed).

    Raises:
        TraceError: a conversion CUDA's printf does not take, too few or
            too many arguments, or an argument its conversion cannot print.
    """
    loc = user_location()
    trace = current()
    trace.require_function()
    try:
        parts = parse_format(fmt.encode())
    except ValueError as e:
        raise with_location(TraceError(f"ptx.printf({fmt!r}): {e}"), loc) from None
    steps = plan(parts)
    slots = layout(parts)
    wanted = sum(1 + p.star for p, _, k in steps if k is not None)
    if len(args) != wanted:
        raise with_location(TraceError(f"ptx.printf({fmt!r}): the format reads {wanted} argument"
                                       f"{'s' if wanted != 1 else ''}, got {len(args)}"), loc)
    _declare_vprintf(trace)
    text = _global_string(trace, fmt)
    stores = []
    values = iter(args)
    for p, star, k in steps:
        if k is None:
            continue
        if star is not None:
            stores.append((slots[star][0], _int(next(values), 4, p, f"the '*' width of '{p}'", fmt, loc)))
        stores.append((slots[k][0], _argument(next(values), p, fmt, loc)))
    depot = _depot(trace, max((off + size for off, size in slots), default=0))
    for off, (value, kind) in stores:
        emit_instruction("st", ("local", kind), (_at(depot, off), value))
    fmt_addr = emit_instruction("cvta", ("global", "u64"), (new_reg(TYPES["u64"]), _address_of(text)))
    buffer = _depot_address(trace) if slots else emit_instruction("mov", ("u64",), (new_reg(TYPES["u64"]), 0))
    result = new_reg(TYPES["s32"])
    with block():
        for name, value in (("param0", fmt_addr), ("param1", buffer)):
            declare("param", "b64", name)
            emit_instruction("st", ("param", "b64"), (_at(name), value))
        declare("param", "b32", "retval0")
        emit_instruction("call", ("uni",), (ir.Parens((ir.Symbol("retval0"),)), ir.Symbol("vprintf"),
                                            ir.Parens((ir.Symbol("param0"), ir.Symbol("param1")))))
        emit_instruction("ld", ("param", "b32"), (result, _at("retval0")))
    return result


def _at(name: str, offset: int | None = None) -> ir.Address:
    return ir.Address(ir.Symbol(name), offset)


def _address_of(name: str) -> Reg:
    return emit_instruction("mov", ("u64",), (new_reg(TYPES["u64"]), ir.Symbol(name)))


def _fail(fmt: str, what: str, loc: Any) -> TraceError:
    return with_location(TraceError(f"ptx.printf({fmt!r}): {what}"), loc)


def _argument(value: Any, c: Conversion, fmt: str, loc: Any) -> tuple[Reg, str]:
    """``value`` as the register to store for conversion ``c``, and the
    store's type."""
    what = f"the argument of '{c}'"
    if c.kind == "int":
        return _int(value, c.size, c, what, fmt, loc)
    if c.kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return emit_instruction("mov", ("f64",), (new_reg(TYPES["f64"]), float(value))), "f64"
        t = _type_of(value)
        if t is not None and t.name == "f64":
            return value, "f64"
        if t is not None and t.name in ("f32", "f16"):
            return emit_instruction("cvt", ("f64", t.name), (new_reg(TYPES["f64"]), value)), "f64"
        raise _fail(fmt, f"{what} must be an f64, f32 or f16 register or a Python float, got {value!r}", loc)
    if c.kind == "string" and isinstance(value, str):
        return emit_instruction("cvta", ("global", "u64"), (new_reg(TYPES["u64"]),
                                                            _address_of(_global_string(current(), value)))), "b64"
    t = _type_of(value)
    if t is None or t.bits != 64 or t.kind not in "bu":
        kind = "a Python str or " if c.kind == "string" else ""
        raise _fail(fmt, f"{what} must be {kind}a 64-bit register holding a generic address, got {value!r}", loc)
    return value, "b64"


def _int(value: Any, size: int, c: Conversion, what: str, fmt: str, loc: Any) -> tuple[Reg, str]:
    """An integer argument of ``size`` bytes: a Python int moved into a
    register, a narrower register widened by its signedness (C's promotions)."""
    bits = size * 8
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(1 << (bits - 1)) <= value < (1 << bits):
            raise _fail(fmt, f"{what}: {value} does not fit in {bits} bits", loc)
        t = TYPES[f"s{bits}"] if value < 0 else TYPES[f"u{bits}"]
        return emit_instruction("mov", (t.name,), (new_reg(t), value)), f"b{bits}"
    t = _type_of(value)
    if t is None or t.kind not in "bus" or t.lanes != 1:
        raise _fail(fmt, f"{what} must be an integer register or a Python int, got {value!r}", loc)
    if t.bits > bits:
        raise _fail(fmt, f"{what} takes {bits} bits; {value.name} is .{t.name} (use 'l' for a 64-bit value)", loc)
    if t.bits < bits:
        wide = TYPES[f"{'s' if t.kind == 's' else 'u'}{bits}"]
        src = t.name if t.kind != "b" else f"u{t.bits}"
        value = emit_instruction("cvt", (wide.name, src), (new_reg(wide), value))
    return value, f"b{bits}"


def _type_of(value: Any) -> PtxType | None:
    return value.type if isinstance(value, Reg) else None


def _declare_vprintf(trace: Any) -> None:
    """The ``.extern .func vprintf`` prototype, once per module."""
    if trace.cache.get("vprintf") or any(isinstance(i, ir.Function) and i.name == "vprintf"
                                         for i in trace.items):
        return
    trace.cache["vprintf"] = True
    params = [ir.VarDecl("param", "b64", f"vprintf_param_{k}") for k in range(2)]
    trace.declare_in_module(ir.Function("func", "vprintf", params, [ir.VarDecl("param", "b32", "func_retval0")],
                                        ("extern",), body=None))


def _global_string(trace: Any, text: str) -> str:
    """The name of a global holding ``text`` NUL-terminated (one per text
    and module, named as nvcc names them: ``$str``, ``$str$1``...)."""
    strings = trace.cache.setdefault("printf strings", {})
    name = strings.get(text)
    if name is None:
        k = len(strings)
        name = trace.new_symbol("$str" if k == 0 else f"$str${k}")
        data = text.encode() + b"\0"
        trace.declare_in_module(ir.VarDecl("global", "b8", name, align=1, dims=(len(data),),
                                           init=tuple(ir.Immediate(b) for b in data), init_braced=True))
        strings[text] = name
    return name


def _depot(trace: Any, nbytes: int) -> str:
    """The function's argument buffer, grown to at least ``nbytes``."""
    def build() -> ir.VarDecl:
        d = ir.VarDecl("local", "b8", trace.new_symbol(_DEPOT), align=8, dims=(8,))
        trace.body.insert(0, d)         # the entry block: declared before any use
        return d
    d = trace.materialise("printf depot", build)
    if nbytes > d.dims[0]:
        d.dims = (nbytes,)
    return _DEPOT


def _depot_address(trace: Any) -> Reg:
    """The buffer's generic address (``cvta.local``), made once per function."""
    def build() -> Reg:
        local = emit_instruction("mov", ("u64",), (new_reg(TYPES["u64"]), ir.Symbol(_DEPOT)))
        return emit_instruction("cvta", ("local", "u64"), (new_reg(TYPES["u64"]), local))
    return trace.materialise("printf depot address", build)
