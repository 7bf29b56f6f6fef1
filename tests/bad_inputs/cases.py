"""The bad inputs: each a short snippet that must fail with a named error
class and a message saying what is wrong (run by ``run_cases.py``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input: ``code`` run after ``PRELUDE`` must raise ``cls`` with a
    message matching ``match``."""

    id: str
    group: str
    code: str
    cls: str
    match: str


PRELUDE = r'''
import os, sys
sys.path.insert(0, os.path.abspath("tests/jax"))   # the JAX test kernels
import numpy as np
import jax, jax.numpy as jnp
import jaxptx
from jaxptx import Tile, kernel, ptx, reg, smem, sim
from jaxptx.types import f32, u32, s32, b64, f16
HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
def K(body, params="", target="sm_90a", version="8.5", regs=".reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<8>; .reg .pred %p<4>;"):
    return f".version {version}\n.target {target}\n.address_size 64\n.visible .entry k({params})\n{{\n {regs}\n{body}\n ret;\n}}\n"
def run(text, *args, **kw):
    kw.setdefault("grid", (1, 1, 1)); kw.setdefault("block", (32, 1, 1))
    sim.launch(text, *args, **kw)
def dev(text, params=(), **kw):
    sim.Device().launch(text, list(params), **kw)
OUT = ".param .u64 out"
'''


def _c(group: str, id: str, code: str, cls: str, match: str) -> Case:
    return Case(id, group, code.strip(), cls, match)


_PARSE = [
    ("unterminated entry", "jaxptx.parse(HEAD + '.visible .entry k()\\n{\\n ret;\\n')", "ParseError", r"7:1: expected '}' before end of input"),
    ("bad hex literal", "jaxptx.parse(K(' mov.u32 %r1, 0xZZ;'))", "ParseError", r"7:15: malformed number '0xZZ'"),
    ("string operand", "jaxptx.parse(K(' mov.u32 %r1, \"x\";'))", "ParseError", r"expected an operand"),
    ("empty operand", "jaxptx.parse(K(' add.s32 %r1, , 1;'))", "ParseError", r"expected an operand, got ','"),
    ("unclosed address", "jaxptx.parse(K(' ld.global.u32 %r1, [%rd1;'))", "ParseError", r"7:26: expected ']', got ';'"),
    ("register count not a number", "jaxptx.parse(K(' ret;', regs='.reg .b32 %r<x>;'))", "ParseError", r"register count"),
    ("unclosed constant expression", "jaxptx.parse(K(' mov.u32 %r1, (1 + 2;'))", "ParseError", r"expected '\)'"),
    ("constant division by zero", "jaxptx.parse(K(' mov.u32 %r1, 4 / (2 - 2);'))", "ParseError", r"division by zero"),
    ("float in a constant expression", "jaxptx.parse(K(' mov.u32 %r1, (1.5 * 2);'))", "ParseError", r"floating-point constant"),
    ("NUL byte", "jaxptx.parse(K(' mov.u32 %r1, 1;\\x00'))", "ParseError", r"7:17: unexpected character"),
    ("not text", "jaxptx.parse(b'.version 8.5')", "TypeError", r"expected PTX text \(str\), got bytes"),
    ("blocks nested too deep", "jaxptx.parse(K('{' * 100000 + '}' * 100000))", "ParseError", r"nesting too deep"),
    ("stray closing brace", "jaxptx.parse(HEAD + '}\\n')", "ParseError", r"4:1: expected a directive, declaration or function, got '}'"),
]

_PRECHECK = [
    ("add.f32 on .b64 registers", "dev(K(' add.f32 %rd2, %rd1, %rd1;'))", "PrecheckError", r"PTX line 7: add\.f32 operand d: expected \.f32 register, got %rd2 \(\.b64\)"),
    ("26-digit literal", "dev(K(' mov.u32 %r1, 99999999999999999999999999;'))", "PrecheckError", r"does not fit in 64 bits"),
    ("unknown directive", "dev(K(' .foo 1;'))", "PrecheckError", r"unknown directive \.foo"),
    ("undeclared register", "dev(K(' mov.u32 %r99, 1;'))", "PrecheckError", r"undeclared register %r99"),
    ("register past its range", "dev(K(' mov.u32 %r999999999, 1;', regs='.reg .b32 %r<999999999>;'))", "PrecheckError", r"undeclared register %r999999999"),
    ("branch into a sibling block", "dev(K(' { bra.uni IN; }\\n { IN: add.u32 %r1, %r1, 1; }'))", "PrecheckError", r"undefined name IN"),
    ("duplicate label", "dev(K(' L: add.u32 %r1, %r1, 1;\\n L: add.u32 %r1, %r1, 1;'))", "PrecheckError", r"duplicate definition of label L"),
    ("duplicate register in a block", "dev(K(' { .reg .b32 t; .reg .b32 t; }'))", "PrecheckError", r"duplicate definition of register t"),
    ("wgmma on sm_80", "dev(K(' wgmma.fence.sync.aligned;', target='sm_80', version='8.0'))", "PrecheckError", r"wgmma\.fence\.sync\.aligned needs sm_90a"),
    ("unknown opcode", "dev(K(' frobnicate.u32 %r1, %r2;'))", "PrecheckError", r"unknown instruction 'frobnicate'"),
    ("unknown modifier", "dev(K(' add.u33 %r1, %r2, %r3;'))", "PrecheckError", r"unknown modifier \.u33"),
    ("wrong operand count", "dev(K(' add.u32 %r1, %r2;'))", "PrecheckError", r"add\.u32: expected 3 operands \(d, a, b\), got 2"),
    ("version too old for target", "dev(K(' ret;', version='7.0'))", "PrecheckError", r"\.version 7\.0 does not know \.target sm_90a"),
    ("32-bit generic address", "dev(K(' ld.u32 %r1, [%r2];'))", "PrecheckError", r"32-bit register; a generic or global address needs a 64-bit one"),
    ("tcgen05 on a Hopper target", "dev(K(' tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;', version='8.8'))", "PrecheckError", r"1 that ptxas would reject.*tcgen05\.relinquish_alloc_permit\.cta_group::1\.sync\.aligned needs sm_100a.*kernel targets sm_90a; pass arch='sm_100a'"),
]

_SIM = [
    ("out-of-bounds load", "run(K(' ld.param.u64 %rd1, [out];\\n ld.global.u32 %r1, [%rd1+4096];', OUT), np.zeros(4, np.uint32))", "SimFault", r"kernel k: ld\.global\.u32: .*offset 0x1000 of parameter 'out' is out of bounds \(its buffer has 16 bytes; CTA 0, thread 0\) \[PTX line 8: ld\.global\.u32"),
    ("misaligned vector load", "run(K(' ld.param.u64 %rd1, [out];\\n ld.global.v4.u32 {%r1,%r2,%r3,%r4}, [%rd1+4];', OUT), np.zeros(16, np.uint32))", "SimFault", r"misaligned 16-byte vector load at 0x1000000004 \(offset 0x4 of parameter 'out'\) by CTA \(0, 0, 0\) thread \(0, 0, 0\) \[PTX line 8: ld\.global\.v4"),
    ("trap", "run(K(' trap;'))", "SimFault", r"kernel k: trap executed by thread \(0, 0, 0\) of CTA \(0, 0, 0\) and 31 other threads \[PTX line 7: trap;\]"),
    ("brx.idx past its list", "run(K(' mov.u32 %r1, 5;\\n ts: .branchtargets A, B;\\n brx.idx %r1, ts;\\nA:\\nB:'))", "SimError", r"brx\.idx index 5 is past the end of ts \(2 targets\)"),
    ("endless loop", "run(K('LOOP: bra.uni LOOP;'))", "SimDeadlock", r"deadlock: 32 threads \(CTA 0 threads 0-31\) spin in the loop at PTX line 7"),
    ("mbarrier phase that never completes", "run(K(' .shared .b64 bar;\\n mbarrier.init.shared.b64 [bar], 64;\\n mbarrier.arrive.shared.b64 %rd1, [bar];\\nW: mbarrier.try_wait.shared.b64 %p1, [bar], %rd1;\\n @!%p1 bra.uni W;'))", "SimDeadlock", r"deadlock: 32 threads .* wait at mbarrier\.try_wait.* to complete its phase 0"),
    ("halves of a CTA at different barriers", "run(K(' mov.u32 %r1, %tid.x;\\n setp.lt.u32 %p1, %r1, 32;\\n @%p1 bra.uni ONE;\\n bar.sync 0;\\n bra.uni END;\\nONE:\\n bar.sync 1;\\nEND:'), block=(64, 1, 1))", "SimDeadlock", r"deadlock: barrier 0 at bar\.sync \(PTX line 10\) reached by 32 threads"),
    ("a .reqntid the launch ignores", "run(K(' ret;').replace('k()', 'k() .reqntid 64'), block=(32, 1, 1))", "SimError", r"launch block \(32, 1, 1\) does not match k's \.reqntid \(64,\)"),
    ("-1 into a .u32 param", "run(K(' ret;', '.param .u32 n'), -1)", "SimError", r"parameter 0 \(n\) \(\.u32, 4 bytes\): -1 is outside 0\.\.4294967295"),
    ("2**40+5 into a .u32 param", "run(K(' ret;', '.param .u32 n'), 2**40 + 5)", "SimError", r"1099511627781 is outside 0\.\.4294967295"),
    ("3.7 into an integer param", "run(K(' ret;', '.param .u32 n'), 3.7)", "SimError", r"expected an int, got float 3\.7"),
    ("too few arguments", "run(K(' ret;', OUT))", "SimError", r"k takes 1 parameters \(\.u64 out\), got 0 arguments"),
    ("param bytes of the wrong size", "dev(K(' ret;', '.param .align 8 .b8 args[24]'), [b'1234'])", "SimError", r"parameter 0 \(args\) \(\.b8, 24 bytes\): expected exactly 24 bytes, got 4"),
    ("grid.y past CUDA's limit", "run(K(' ret;'), grid=(1, 70000, 1))", "SimLaunchError", r"grid\.y = 70000 exceeds CUDA's limit of 65535"),
    ("block.z past CUDA's limit", "run(K(' ret;'), block=(1, 1, 128))", "SimLaunchError", r"block\.z = 128 exceeds CUDA's limit of 64"),
    ("threads per block", "run(K(' ret;'), block=(64, 32, 1))", "SimLaunchError", r"has 2048 threads, over CUDA's limit of 1024 threads per block"),
    ("cluster on sm_80", "run(K(' ret;', target='sm_80', version='8.0'), grid=(2, 1, 1), cluster=(2, 1, 1))", "SimLaunchError", r"cluster = \(2, 1, 1\) needs sm_90 or newer"),
    ("grid not a multiple of the cluster", "run(K(' ret;'), grid=(3, 1, 1), cluster=(2, 1, 1))", "SimLaunchError", r"not a multiple of cluster\.x"),
    ("a gigabyte of shared memory", "run(K(' ret;'), smem=10**9)", "SimLaunchError", r"smem = 1000000000 bytes"),
    ("launch larger than the host", "run(K(' ret;'), grid=(2**31 - 1, 1, 1), block=(1024, 1, 1))", "SimMemoryError", r"GiB of emulator state \(over the limit of"),
    ("no such kernel", "run(K(' ret;'), kernel='other')", "SimError", r"no kernel 'other' in the module; kernels: k"),
    ("max_steps", "run(K('L: add.u32 %r1, %r1, 1;\\n bra.uni L;'), max_steps=100)", "SimError", r"more than 100 steps \(max_steps\); still running: 32 threads"),
    ("tcgen05 double free", "run(K(' .shared .b32 slot;\\n tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;\\n ld.shared.b32 %r1, [slot];\\n tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r1, 32;\\n tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r1, 32;', target='sm_100a', version='8.8'))", "SimError", r"no allocation holds exactly these columns \(freed twice, or never allocated\?\)"),
    ("tcgen05 leak at exit", "run(K(' .shared .b32 slot;\\n tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;', target='sm_100a', version='8.8'))", "SimError", r"CTA 0 exited still holding tensor memory columns 0\.\.31, allocated by .* \[PTX line 8\]"),
    ("wmma from a misaligned address", "run(K(' ld.param.u64 %rd1, [out];\\n wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, [%rd1+2];', OUT), np.zeros(600, np.float16))", "SimError", r"not 256-bit aligned"),
    ("wmma by half a warp", "run(K(' ld.param.u64 %rd1, [out];\\n wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, [%rd1];', OUT), np.zeros(600, np.float16), block=(16, 1, 1))", "SimError", r"16 of the 32 threads of a warp"),
    ("device address from nowhere", "d = sim.Device(); d.read(12345, 4)", "SimError", r"0x3039 is not an address on this device"),
    ("read past an allocation", "d = sim.Device(); a = d.alloc(16); d.read(a, 32)", "SimError", r"32 bytes at 0x1000000000 go past the end of the allocation"),
    ("bad arch for a Device", "sim.Device(arch='hopper')", "SimError", r"Device: arch: expected a target like 'sm_80'"),
]

_DSL = [
    ("if never closed", "@kernel(arch='sm_80')\ndef k():\n    p = reg.pred(init=1)\n    ptx.if_(p).__enter__()\nk.ptx()", "TraceError", r"was entered but its block never closed"),
    ("if never used", "@kernel(arch='sm_80')\ndef k():\n    ptx.if_(reg.pred(init=1))\nk.ptx()", "TraceError", r"was never used"),
    ("f32 immediate 1e40", "@kernel(arch='sm_80')\ndef k():\n    x = reg.scalar(f32)\n    ptx.mov.f32(x, 1e40)\nk.ptx()", "PtxOperandError", r"immediate 1e\+40 does not fit \.f32 \(largest finite \.f32: 3\.4028235e\+38\), at <string>:4"),
    ("integer division by constant zero", "@kernel(arch='sm_80')\ndef k():\n    x = reg.scalar(u32)\n    y = x // 0\nk.ptx()", "PtxOperandError", r"div\.u32 operand b: division by the constant 0"),
    ("wgmma for sm_80", "@kernel(arch='sm_80')\ndef k():\n    ptx.wgmma.fence.sync.aligned()\nk.ptx()", "PtxTargetError", r"needs sm_90a"),
    ("operand of the wrong type", "@kernel(arch='sm_80')\ndef k():\n    a = reg.scalar(f32)\n    b = reg.scalar(u32)\n    ptx.add.f32(a, a, b)\nk.ptx()", "PtxTypeError", r"add\.f32 operand b: expected \.f32"),
    ("unknown modifier in the namespace", "@kernel(arch='sm_80')\ndef k():\n    a = reg.scalar(u32)\n    ptx.add.u33(a, a, a)\nk.ptx()", "PtxModifierError", r"unknown modifier \.u33 \(did you mean \.u32\?\)"),
    ("register of another kernel", "held = []\n@kernel(arch='sm_80')\ndef a():\n    held.append(reg.scalar(u32))\na.ptx()\n@kernel(arch='sm_80')\ndef b():\n    ptx.mov.u32(held[0], 1)\nb.ptx()", "TraceError", r"register %r1 belongs to kernel a, not to kernel b"),
    ("shared index past the end", "@kernel(arch='sm_80')\ndef k():\n    s = smem.alloc(f32, 16)\n    x = s[16]\nk.ptx()", "TraceError", r"index 16 of dim 0 is out of range 0\.\.15, at <string>:4"),
    ("grid.y past the limit at decoration", "kernel(grid=(1, 70000, 1), arch='sm_80')(lambda: None)", "LaunchError", r"grid\.y = 70000 exceeds CUDA's limit of 65535"),
    ("2048 threads a block", "kernel(block=(2048, 1, 1), arch='sm_80')(lambda: None)", "LaunchError", r"block\.x = 2048"),
    ("cluster on sm_80 at decoration", "kernel(grid=(2, 1, 1), cluster=(2, 1, 1), arch='sm_80')(lambda: None)", "LaunchError", r"cluster = \(2, 1, 1\) needs sm_90 or newer"),
    ("static shared memory over 48 KB", "@kernel(arch='sm_90a')\ndef k():\n    s = smem.alloc(f32, 20000)\n    ptx.ret()\nk.ptx()", "LaunchError", r"48 KB"),
    ("grid function over a limit", "@kernel(in_specs=(Tile('N', f32),), out_specs=(Tile('N', f32),), grid=lambda N: (1, N, 1), arch='sm_90a')\ndef k(x, y):\n    ptx.ret()\nk.ptx(N=70000)", "LaunchError", r"grid\.y = 70000"),
    ("unknown target", "kernel(arch='sm_91')(lambda: None).ptx()", "PtxTargetError", r"unknown target 'sm_91'"),
]

_JAX = [
    ("wrong dtype", "from jax_kernels import affine\njax.jit(affine)(np.zeros(256, np.int32))", "SpecError", r"argument 'x': expected dtype f32 .* got int32"),
    ("wrong rank", "from jax_kernels import affine\njax.jit(affine)(np.zeros((2, 128), np.float32))", "SpecError", r"expected rank 1 .* got rank 2 with shape \(2, 128\)"),
    ("grad of a bare kernel", "from jax_kernels import affine\njax.grad(lambda x: affine(x).sum())(np.zeros(256, np.float32))", "SpecError", r"kernel affine has no derivative: .*jaxptx\.custom_vjp"),
    ("inputs whose shared dim disagrees", "from jax_kernels import axpy_index\njax.jit(axpy_index)(np.zeros(256, np.float32), np.zeros(128, np.float32))", "SpecError", r"argument 'w' dim 0 \('N'\): expected 256 \(bound by argument 'x' dim 0\), got 128"),
    ("a raw scalar out of range under jit", "@kernel(in_specs=(Tile('N', f32),), out_specs=(Tile('N', f32),), raw_params=[('u32', 'n')], grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch='sm_90a')\ndef k(x, y):\n    ptx.ret()\njax.jit(lambda x: k(x, n=-1))(np.zeros(128, np.float32))", "SpecError", r"raw param n \(\.u32\): -1 is outside 0\.\.4294967295"),
    ("output the grid does not cover", "from unwritten_kernels import short_grid\njax.block_until_ready(jax.jit(short_grid)(np.arange(200, dtype=np.float32)))", "JaxRuntimeError|ValueError", r"INTERNAL: UnwrittenOutputError: kernel short_grid: output 0 'y'"),
    ("emulator fault under jit names the kernel line", "from jax_kernels import wild_load\njax.block_until_ready(jax.jit(wild_load)(np.arange(256, dtype=np.float32)))", "JaxRuntimeError|ValueError", r"SimFault: kernel wild_load: ld\.global\.f32"),
    ("edited PTX under a known kernel id", "from jaxptx import _ffi\nfrom jax_kernels import affine\nraise RuntimeError(_ffi.check_call('jaxptx_cpu_v2', 1, affine.ptx(N=256).encode(), 'affine', [2,1,1], [128,1,1], [1,1,1], 0, [1024], [1024], []))", "RuntimeError", r"the call's PTX, entry or launch does not match its kernel id"),
]

CASES: list[Case] = [
    *(_c("parse", *c) for c in _PARSE), *(_c("precheck", *c) for c in _PRECHECK),
    *(_c("sim", *c) for c in _SIM), *(_c("dsl", *c) for c in _DSL), *(_c("jax", *c) for c in _JAX),
]
