"""Each thread's local memory starts at a 16-byte boundary: a kernel whose
local variables come to a size that is not a multiple of their alignment
(an 8-aligned depot plus a 4-byte call parameter: 12 bytes) keeps every
thread's 8-byte accesses aligned to its own depot. (The windows were packed
at 12 bytes, so thread 1's ``st.local.f64 [depot]`` landed 4 bytes early.)"""

import numpy as np

from jaxptx import sim
from jaxptx.runtime import ptxas

_KERNEL = """.version 8.0
.target sm_80
.address_size 64

.visible .entry k(
	.param .u64 k_param_0
)
{
	.local .align 8 .b8 	depot[8];
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<6>;
	.reg .f64 	%fd<3>;

	ld.param.u64 	%rd1, [k_param_0];
	mov.u32 	%r1, %tid.x;
	cvt.rn.f64.u32 	%fd1, %r1;
	st.local.f64 	[depot], %fd1;
	{
	.param .b32 unused;
	st.param.b32 	[unused], %r1;
	}
	ld.local.f64 	%fd2, [depot];
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 8;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.f64 	[%rd4], %fd2;
	ret;
}
"""


def test_every_threads_local_depot_keeps_its_own_8_byte_values():
    ptxas(_KERNEL, "sm_80")
    out = np.full(4, -1.0)
    sim.launch(_KERNEL, out, grid=(1, 1, 1), block=(4, 1, 1))
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
