"""The DSL's refusals of misuse (issue 30): a kernel name that is no PTX
identifier, a template keyword shadowing a dim, control-flow constructs used the wrong
way, a register index out of range and a template value of the wrong type
each fail at once, naming what is wrong, at the user's line, with the fix."""

from __future__ import annotations

import inspect
import os
import re
from typing import Literal, Optional

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, reg
from jaxptx.errors import PtxTypeError, SpecError, TraceError
from jaxptx.types import f32, u32

HERE = os.path.basename(__file__)


def _line(marker: str) -> int:
    """The line of this file holding ``marker`` (in a comment)."""
    source = inspect.getsource(inspect.getmodule(_line)).splitlines()
    return next(i for i, text in enumerate(source, 1) if text.rstrip().endswith(marker))


# --- 1: kernel names ----------------------------------------------------------------------
@pytest.mark.parametrize("name, suggestion", [
    ("my kernel!", "my_kernel"), ("x.y", "x_y"), ("_", "kernel"), ("\u00e9t\u00e9", "t"),
    ("WARP_SZ", "WARP_SZ_"), ("9lives", "k_9lives"),
])
def test_a_name_that_is_not_a_ptx_identifier_is_refused_at_decoration(name, suggestion) -> None:
    with pytest.raises(TraceError, match=rf"^@kernel {re.escape(name)}: name={re.escape(repr(name))} "
                                         rf"is not a valid \.entry name \(.*\); pass a PTX "
                                         rf"identifier such as name='{suggestion}'$"):
        @kernel(name=name, arch="sm_80")
        def k():
            ptx.ret()


def test_a_function_name_that_is_not_a_ptx_identifier_is_refused_at_trace() -> None:
    k = kernel(arch="sm_80")(lambda: ptx.ret())     # options alone may be tested on a lambda
    with pytest.raises(TraceError, match=r"^kernel <lambda>: the function's name '<lambda>' is not "
                                         r"a valid \.entry name \(a PTX name is ASCII letters, "
                                         r"digits, _ and \$, and starts with a letter.*\); pass a "
                                         r"PTX identifier such as name='lambda'$"):
        k.ptx()
    assert ".entry ok()" in kernel(arch="sm_80", name="ok")(lambda: ptx.ret()).ptx()


@pytest.mark.parametrize("name", ["k", "_k", "$k", "__", "my_kernel$2"])
def test_ptx_identifiers_are_accepted(name) -> None:
    @kernel(name=name, arch="sm_80")
    def k():
        ptx.ret()
    assert f".visible .entry {name}()" in k.ptx()


# --- 2: template keywords and dims share one namespace -----------------------------------
def test_a_template_param_named_like_a_dim_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^@kernel k: the template param 'N' has the name of the "
                                        r"symbolic dim 'N' of out_specs\[0\] Tile\('M', 'N', f32, "
                                        r"Layout\.ROW\); a keyword N=\.\.\. would set only one of "
                                        r"them\. Rename the template param$"):
        @kernel(in_specs=(Tile("M", f32),), out_specs=(Tile("M", "N", f32),), arch="sm_80")
        def k(x, y, *, N=4):
            ptx.ret()


def test_a_raw_param_named_like_a_template_param_is_refused() -> None:
    with pytest.raises(SpecError, match=r"@kernel k: the template param 'n' has the name of the raw "
                                        r"param 'n'"):
        @kernel(raw_params=[("u32", "n")], arch="sm_80")
        def k(*, n=1):
            ptx.ret()


def test_a_raw_param_named_like_a_dim_takes_the_dims_size() -> None:
    import jax
    import numpy as np

    from jaxptx import Tile
    from jaxptx.types import f32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), raw_params=[("u32", "N")],
            grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1), arch="sm_80")
    def count(x, y):
        off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
        ptx.st.global_.f32(y.ptr + off, ptx.cvt.rn.f32.u32(ptx.param("N")))

    x = np.zeros(64, np.float32)
    np.testing.assert_array_equal(jax.jit(count)(x), np.full(64, 64, np.float32))
    with pytest.raises(SpecError, match=r"kernel count: raw param N is named like the dim N, which the "
                                        r"inputs bind to 64; got N=32 \(leave it out"):
        count(x, N=32)


# --- 7: control flow used the wrong way --------------------------------------------------
def test_else_without_if_points_at_the_users_line() -> None:
    @kernel(arch="sm_80")
    def k():
        with ptx.else_():  # <- else_
            pass
    with pytest.raises(TraceError, match=rf"ptx\.else_\(\) must directly follow a `with "
                                         rf"ptx\.if_\(\.\.\.\)` block, at {HERE}:{_line('# <- else_')}$"):
        k.ptx()


@pytest.mark.parametrize("construct", ["range_", "while_"])
def test_a_loop_used_as_a_with_block_says_how_to_write_it(construct) -> None:
    @kernel(arch="sm_80")
    def k():
        t = reg.from_(ptx.special.tid.x(), u32)
        loop = ptx.range_(0, 4) if construct == "range_" else ptx.while_(lambda: t < 4)
        with loop:  # <- with loop
            pass
    usage = "for i in" if construct == "range_" else "for _ in"
    with pytest.raises(TraceError, match=rf"ptx\.{construct}\(\.\.\.\) is a runtime loop, not a "
                                         rf"block: write `{usage} ptx\.{construct}\(\.\.\.\):`, not "
                                         rf"`with ptx\.{construct}\(\.\.\.\):`, at "
                                         rf"{HERE}:{_line('# <- with loop')}$"):
        k.ptx()


def test_if_used_as_a_for_loop_says_how_to_write_it() -> None:
    @kernel(arch="sm_80")
    def k():
        t = reg.from_(ptx.special.tid.x(), u32)
        for _ in ptx.if_(t < 4):  # <- for if
            pass
    with pytest.raises(TraceError, match=rf"ptx\.if_\(\.\.\.\) is a block, not a loop: write `with "
                                         rf"ptx\.if_\(\.\.\.\):`, not `for \.\.\. in ptx\.if_\(\.\.\.\):`; "
                                         rf"a runtime loop is `for i in ptx\.range_\(\.\.\.\)` or "
                                         rf"`for _ in ptx\.while_\(\.\.\.\)`, at {HERE}:{_line('# <- for if')}$"):
        k.ptx()


# --- 8: register arrays ------------------------------------------------------------------
@pytest.mark.parametrize("index", [4, -5, 100])
def test_an_index_past_a_register_array_names_it_its_size_and_the_index(index) -> None:
    @kernel(arch="sm_80")
    def k():
        a = reg.array(f32, 4)
        a[index].set(1.0)  # <- index
    with pytest.raises(IndexError, match=rf"register array %f1\.\.%f4 \(4 x \.f32\): index {index} is "
                                         rf"out of range; it has 4 register\(s\), indices 0\.\.3 "
                                         rf"\(or -4\.\.-1\), at {HERE}:{_line('# <- index')}$"):
        k.ptx()


def test_a_register_array_still_iterates_and_takes_numpy_ints() -> None:
    @kernel(arch="sm_80")
    def k():
        a = reg.array(f32, 3)
        assert len(list(a)) == 3 and a[np.int64(2)] is a[-1]
        ptx.ret()
    k.ptx()


def test_a_register_array_index_must_be_an_int() -> None:
    @kernel(arch="sm_80")
    def k():
        a = reg.array(f32, 2)
        a[1.0].set(1.0)
    with pytest.raises(PtxTypeError, match=r"register array %f1\.\.%f2 \(2 x \.f32\): expected an "
                                           r"int index, got 1\.0 \(float\)"):
        k.ptx()


# --- 9: template values ------------------------------------------------------------------
@kernel(arch="sm_80")
def scaled(*, n: int = 4, eps=1e-6, mode: Literal["a", "b"] = "a", k: Optional[int] = None,
           flag=False):
    t = reg.from_(ptx.special.tid.x(), u32)
    ptx.inst.add.u32(t, t, n)


@pytest.mark.parametrize("values, message", [
    (dict(n="abc"), r"template param 'n': expected an int, got 'abc' \(str\); declared `n: int`"),
    (dict(n=2.5), r"template param 'n': expected an int, got 2\.5 \(float\); declared `n: int`"),
    (dict(n=True), r"template param 'n': expected an int, got True \(bool\)"),
    (dict(eps="x"), r"template param 'eps': expected a real number \(int or float\), got 'x' "
                    r"\(str\); its default is 1e-06; annotate it \(`eps: <type> = 1e-06`\)"),
    (dict(mode="c"), r"template param 'mode': expected one of 'a', 'b', got 'c' \(str\)"),
    (dict(k="1"), r"template param 'k': expected an int or None, got '1' \(str\)"),
    (dict(flag=1), r"template param 'flag': expected a bool, got 1 \(int\)"),
])
def test_a_template_value_of_the_wrong_type_names_the_keyword(values, message) -> None:
    with pytest.raises(SpecError, match=r"^kernel scaled: " + message):
        scaled.ptx(**values)


def test_template_values_of_the_declared_types_trace() -> None:
    for values in [dict(n=3), dict(eps=1), dict(eps=np.float32(0.5)), dict(mode="b"),
                   dict(k=3), dict(flag=np.bool_(True))]:
        assert "add.u32" in scaled.ptx(**values)


# --- 6, traced: the table's rule applies where the instruction is written -------------------
def test_a_traced_barrier_count_that_is_not_whole_warps_fails_at_its_line() -> None:
    @kernel(arch="sm_80", block=(64, 1, 1))
    def k():
        ptx.bar.sync(1, 48)  # <- bar
    with pytest.raises(ValueError, match=rf"^bar\.sync operand b: expected a multiple of 32 \(a thread "
                                         rf"count of whole warps\), got 48, at {HERE}:{_line('# <- bar')}$"):
        k.ptx()
