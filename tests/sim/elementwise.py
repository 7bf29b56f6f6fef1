"""One thread per element: run a PTX instruction over numpy inputs on the
emulator (the harness of the arithmetic and logic semantics tests)."""

from __future__ import annotations

import numpy as np

from jaxptx import sim

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
HEAD_SM100 = ".version 8.8\n.target sm_100a\n.address_size 64\n"
# x[tid] *= k: the sim.Device docstring's kernel, for tests of launches
# rather than of an instruction.
SCALE_PTX = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry scale(.param .u64 x, .param .f32 k)
{
    .reg .b32 %r<3>; .reg .b64 %rd<4>; .reg .f32 %f<3>;
    ld.param.u64 %rd1, [x];
    ld.param.f32 %f1, [k];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.f32 %f2, [%rd3];
    mul.f32 %f2, %f2, %f1;
    st.global.f32 [%rd3], %f2;
    ret;
}"""


def ew(ins: str, out_dtype, *args: np.ndarray, tail: str = "", pre: str = "",
       body: str | None = None, head: str = HEAD) -> np.ndarray:
    """Run ``ins %d, %x0, %x1, ...{tail}`` once per element of the inputs (one
    thread per element, operands loaded from global memory by bit width).

    ``pre`` goes before the instruction; ``body`` replaces it and may use
    ``%d``, ``%x<i>`` and ``%p0..%p7``; ``head`` is the module header (version, target)."""
    n = len(args[0])
    block = min(n, 128)
    total = -(-n // block) * block
    ins_args = [np.resize(np.ascontiguousarray(a), total) for a in args]
    out = np.zeros(total, out_dtype)
    ow = out.dtype.itemsize * 8
    params = ", ".join([".param .u64 out"] + [f".param .u64 p{i}" for i in range(len(args))])
    lines = [f".visible .entry k({params})", "{", "    .reg .b64 %rd<40>; .reg .b32 %t<4>; .reg .pred %p<8>;",
             f"    .reg .b{ow} %d;",
             "    mov.u32 %t0, %tid.x; mov.u32 %t1, %ctaid.x; mov.u32 %t2, %ntid.x;",
             "    mad.lo.u32 %t0, %t1, %t2, %t0;"]
    ops = []
    for i, a in enumerate(ins_args):
        w = a.dtype.itemsize * 8
        lines += [f"    .reg .b{w} %x{i};", f"    ld.param.u64 %rd{2 * i + 10}, [p{i}];",
                  f"    mul.wide.u32 %rd{2 * i + 11}, %t0, {w // 8};",
                  f"    add.s64 %rd{2 * i + 10}, %rd{2 * i + 10}, %rd{2 * i + 11};",
                  f"    ld.global.b{w} %x{i}, [%rd{2 * i + 10}];"]
        ops.append(f"%x{i}")
    lines += [pre, body if body is not None else f"    {ins} %d, {', '.join(ops)}{tail};",
              "    ld.param.u64 %rd1, [out];", f"    mul.wide.u32 %rd2, %t0, {ow // 8};",
              "    add.s64 %rd1, %rd1, %rd2;", f"    st.global.b{ow} [%rd1], %d;", "    ret;", "}"]
    sim.launch(head + "\n".join(lines), out, *ins_args, grid=(total // block, 1, 1), block=(block, 1, 1))
    return out[:n]
