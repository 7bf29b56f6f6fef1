"""Never silently wrong: a launch refuses, before anything runs, PTX that
ptxas would reject and instructions the emulator cannot run, naming each
PTX line (and the Python line of a traced kernel); the checks run once per
module."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, sim
from jaxptx.errors import PtxasError
from jaxptx.runtime import ptxas
from jaxptx.sim import Device, PrecheckError, SimError
from jaxptx.sim import device_modules
from jaxptx.sim import precheck
from jaxptx.sim.semantics import SEMANTICS, UNSUPPORTED
from jaxptx.types import u32

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"


def store_kernel(body: str, name: str = "k", funcs: str = "") -> str:
    """A kernel whose body computes %rd2 and stores it to out (PTX line 8 is body's first)."""
    return HEAD + funcs + f""".visible .entry {name}(.param .u64 out)
{{
    .reg .b64 %rd<4>; .reg .b32 %r<4>;
    ld.param.u64 %rd1, [out];
    {body}
    st.global.u64 [%rd1], %rd2;
    ret;
}}
"""


def test_add_f32_on_b64_registers_is_refused_before_running() -> None:
    """It used to run and store 0.0."""
    text = store_kernel("mov.u64 %rd2, 7;\n    add.f32 %rd2, %rd1, %rd1;")
    with pytest.raises(PtxasError, match="Arguments mismatch"):
        ptxas(text, "sm_90a")
    out = np.full(1, 99, np.uint64)
    with pytest.raises(PrecheckError, match=r"k: refused before running: 1 that ptxas would reject\n"
                                            r"  PTX line 9: add.f32 operand d: expected .f32 register, got %rd2 "
                                            r"\(.b64\)\n      add.f32 %rd2, %rd1, %rd1;") as e:
        sim.launch(text, out)
    assert out[0] == 99                             # nothing ran
    assert [(p.line, p.emulator) for p in e.value.problems] == [(9, False)]
    assert isinstance(e.value, SimError)


def test_integer_literal_wider_than_64_bits_is_refused() -> None:
    """A 26-digit literal used to be truncated; ptxas says Constant overflow."""
    text = store_kernel("mov.u64 %rd2, 12345678901234567890123456;")
    with pytest.raises(PtxasError, match="Constant overflow"):
        ptxas(text, "sm_90a")
    with pytest.raises(PrecheckError, match=r"PTX line 8: mov.u64: the integer constant 12345678901234567890123456 "
                                            r"does not fit in 64 bits"):
        Device().launch(text, [0])
    widest = store_kernel("mov.u64 %rd2, 18446744073709551615;")
    ptxas(widest, "sm_90a")
    out = np.zeros(1, np.uint64)
    sim.launch(widest, out)
    assert int(out[0]) == 2**64 - 1


def test_every_problem_is_listed_in_line_order() -> None:
    text = store_kernel("add.f32 %rd2, %rd1, %rd1;\n    mov.u32 %r1, 0x1FFFFFFFFFFFFFFFFFFFF;\n"
                        "    bra NOWHERE;").replace(".version 8.5", ".version 7.0")
    with pytest.raises(PrecheckError, match=r"^k: refused before running: 4 that ptxas would reject\n") as e:
        sim.launch(text, np.zeros(1, np.uint64))
    message = str(e.value)
    assert message.startswith("k: refused before running: 4 that ptxas would reject\n"
                              "  PTX line 1: .version 7.0 does not know .target sm_90a; it needs 8.0 or newer\n"
                              "      .version 7.0\n"
                              "  PTX line 8: add.f32 operand d"), message
    assert [p.line for p in e.value.problems] == [1, 8, 9, 10]
    assert "PTX line 10: bra: undefined name NOWHERE\n      bra NOWHERE;" in message


def test_device_arch_is_the_target_checked() -> None:
    text = store_kernel("mov.u64 %rd2, 1;\n    fence.proxy.async.shared::cta;")
    dev = Device()
    out = dev.alloc(8)
    dev.launch(text, [out])
    with pytest.raises(PrecheckError, match=r"PTX line 9: fence.proxy.async.shared::cta.* needs sm_90"):
        Device(arch="sm_80").launch(text, [out])


@pytest.fixture
def popc_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take popc out of the emulator for one test (as trap and tcgen05 were):
    the registry itself is what the precheck reads."""
    monkeypatch.delitem(SEMANTICS, "popc")
    monkeypatch.setitem(UNSUPPORTED, "popc", "popc is not emulated (test)")


FUNCS = """.func (.reg .b32 r) used(.reg .b32 a)
{
    popc.b32 r, a;
    ret;
}
.func (.reg .b32 r) unused(.reg .b32 a)
{
    popc.b32 r, a;
    ret;
}
"""


def test_instructions_the_emulator_cannot_run_are_listed(popc_unsupported) -> None:
    """In the entry and in functions it calls; never in ones it cannot reach."""
    body = "mov.u32 %r1, 5;\n    popc.b32 %r2, %r1;\n    call (%r3), used, (%r2);\n    cvt.u64.u32 %rd2, %r3;"
    text = store_kernel(body, funcs=FUNCS)
    ptxas(text, "sm_90a")
    with pytest.raises(PrecheckError, match=r"k: refused before running: 2 that the emulator cannot run\n"
                                            r"  PTX line 19: popc.b32: popc is not emulated \(test\)\n"
                                            r"      popc.b32 %r2, %r1;\n"
                                            r"  PTX line 6: popc.b32: popc is not emulated \(test\)") as e:
        sim.launch(text, np.zeros(1, np.uint64))
    assert [(p.line, p.emulator) for p in e.value.problems] == [(19, True), (6, True)]


def test_an_instruction_without_semantics_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(SEMANTICS, "popc")
    text = store_kernel("mov.u32 %r1, 5;\n    popc.b32 %r2, %r1;\n    cvt.u64.u32 %rd2, %r2;", name="nosem")
    with pytest.raises(PrecheckError, match=r"PTX line 9: popc.b32: the emulator has no semantics for it "
                                            r"\(table name 'popc'\)"):
        Device().launch(text, [0])


def _marked_line() -> int:
    lines = pathlib.Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "# <- refused" in line and "lines" not in line)


def test_a_traced_kernel_names_the_python_line(popc_unsupported) -> None:
    @kernel(arch="sm_90a", block=(32, 1, 1), in_specs=(Tile(32, u32),), out_specs=(Tile(32, u32),),
            name="traced_popc")
    def k(x, y):
        tid = ptx.special.tid.x()
        off = ptx.mul.wide.u32(tid, 4)
        v = ptx.ld.global_.u32(ptx.addr(x.ptr + off))
        w = ptx.popc.b32(v)  # <- refused
        ptx.st.global_(u32, ptx.addr(y.ptr + off), w)

    text = k.ptx()
    line = text.splitlines().index("\tpopc.b32 %r3, %r2;") + 1
    with pytest.raises(PrecheckError, match=rf"PTX line {line} \(test_precheck.py:{_marked_line()}\): popc.b32: "
                                            r"popc is not emulated \(test\)\n      popc.b32 %r3, %r2;"):
        sim.launch(k, np.zeros(32, np.uint32), np.zeros(32, np.uint32))


def test_checks_run_once_per_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """PTX text is parsed and checked once, however many launches and devices."""
    calls = {"check": 0, "parse": 0}
    real_check, real_parse = precheck.check, device_modules.parse

    def counted_check(*args, **kwargs):
        calls["check"] += 1
        return real_check(*args, **kwargs)

    def counted_parse(*args, **kwargs):
        calls["parse"] += 1
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(precheck, "check", counted_check)
    monkeypatch.setattr(device_modules, "parse", counted_parse)
    text = store_kernel("mov.u64 %rd2, 41;\n    add.u64 %rd2, %rd2, 1;", name="once")
    out = np.zeros(1, np.uint64)
    for _ in range(3):
        sim.launch(text, out)
    dev = Device()
    dev.launch(text, [dev.to_device(out)])
    assert out[0] == 42 and calls == {"check": 1, "parse": 1}
