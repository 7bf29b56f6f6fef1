"""The trace's fast paths for instructions whose operands are all registers
(a signature checked in full once per process, then emitted directly): they
give the same text as the full path, and still refuse what the full path
refuses — a register of another trace, a guard of another trace, a target
the form needs more than, a register re-typed by hand."""

from __future__ import annotations

import pytest

from jaxptx import kernel, ptx, reg
from jaxptx.dsl._core import Reg
from jaxptx.dsl._trace import _REGISTER_FORMS
from jaxptx.errors import PtxTargetError, PtxTypeError, TraceError
from jaxptx.types import b32, f32, u32


def _adds(n: int):
    def body() -> None:
        a, b = reg.scalar(f32, 1.0), reg.scalar(f32, 2.0)
        for _ in range(n):
            ptx.inst.add.f32(a, a, b)
            ptx.inst.fma.rn.f32(b, a, a, b)
        ptx.ret()
    return body


def test_the_fast_path_emits_what_the_full_path_emits() -> None:
    first = kernel(arch="sm_90a", name="k")(_adds(3)).ptx()      # fills the signature cache
    assert any(k[:2] == ("fma", ("rn", "f32")) and k[3:] == ("f32",) * 4
               for forms in _REGISTER_FORMS.values() for k in forms)
    _REGISTER_FORMS.clear()
    full = kernel(arch="sm_90a", name="k")(_adds(3)).ptx()       # the full path again, for each
    again = kernel(arch="sm_90a", name="k")(_adds(3)).ptx()      # cached
    assert first == full == again
    assert again.count("add.f32") == 3 and again.count("fma.rn.f32") == 3


def test_a_register_of_another_kernel_is_refused_after_its_signature_is_cached() -> None:
    kept = []

    @kernel(arch="sm_80")
    def first():
        a = reg.scalar(u32, 1)
        ptx.add.u32(a, a, a)
        kept.append(a)
    first.ptx()

    @kernel(arch="sm_80")
    def second():
        a = reg.scalar(u32, 1)
        ptx.add.u32(a, a, a)          # the signature is cached now
        ptx.add.u32(a, a, kept[0])
    with pytest.raises(TraceError, match=r"register %r1 belongs to kernel first, not to kernel second"):
        second.ptx()


def test_a_guard_of_another_kernel_is_refused_on_the_fast_path() -> None:
    kept = []

    @kernel(arch="sm_80")
    def first():
        kept.append(reg.pred(init=1))
    first.ptx()

    @kernel(arch="sm_80")
    def second():
        a = reg.scalar(u32, 1)
        p = reg.pred(init=1)
        ptx.add.u32(a, a, a, pred=p)
        ptx.add.u32(a, a, a, pred=kept[0])
    with pytest.raises(TraceError, match=r"belongs to kernel first, not to kernel second"):
        second.ptx()


def test_the_target_is_part_of_the_signature() -> None:
    def body() -> None:
        d = reg.scalar(b32)
        a, b = reg.scalar(f32, 1.0), reg.scalar(f32, 2.0)
        ptx.cvt.rn.bf16x2.f32(d, a, b)
    kernel(arch="sm_90a", name="k")(body).ptx()
    with pytest.raises(PtxTargetError, match=r"cvt\.rn\.bf16x2\.f32.*sm_80"):
        kernel(arch="sm_75", name="k")(body).ptx()


def test_a_register_made_by_hand_with_another_type_takes_the_full_check() -> None:
    @kernel(arch="sm_80")
    def k():
        b = reg.scalar(f32, 1.0)
        ptx.add.f32(b, b, b)                 # caches add.f32 over three f32 registers
        a = reg.scalar(u32, 1)
        fake = Reg(a.name, f32, a.owner)     # %r1 is a .u32; called an f32 here
        ptx.add.f32(fake, fake, fake)
    with pytest.raises(PtxTypeError, match=r"add\.f32 operand d: expected \.f32 register, got %r1 \(\.u32\)"):
        k.ptx()
