"""``brx.idx`` (indirect branches through a ``.branchtargets`` list) and
``trap`` on the emulator; every kernel assembled by ptxas."""

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

_BRX = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<3>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r4, [n];
  mov.u32 %r1, %tid.x;
  rem.u32 %r2, %r1, %r4;
  ts: .branchtargets L0, L1, L2;
  brx.idx %r2, ts;
L0:
  mov.u32 %r3, 100;
  bra.uni END;
L1:
  mov.u32 %r3, 200;
  bra.uni END;
L2:
  mov.u32 %r3, 300;
END:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r3;
  ret;
}
"""


def test_brx_idx_sends_each_thread_to_its_target():
    ptxas(_BRX, "sm_90a")
    out = np.zeros(64, np.uint32)
    sim.launch(_BRX, out, np.uint32(3), grid=(1, 1, 1), block=(64, 1, 1))
    np.testing.assert_array_equal(out, (np.arange(64) % 3 + 1) * 100)


def test_brx_idx_with_one_index_for_every_thread():
    out = np.zeros(32, np.uint32)
    sim.launch(_BRX, out, np.uint32(1), grid=(1, 1, 1), block=(32, 1, 1))
    assert (out == 100).all()


def test_brx_idx_past_the_list_is_a_fault_naming_the_thread():
    out = np.zeros(32, np.uint32)
    with pytest.raises(SimError, match=r"index 3 is past the end of ts \(3 targets\), thread \(3, 0, 0\)"):
        sim.launch(_BRX, out, np.uint32(5), grid=(1, 1, 1), block=(32, 1, 1))


_TRAP = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  setp.eq.u32 %p1, %r1, 5;
  @!%p1 bra.uni SKIP;
  setp.eq.u32 %p1, %r2, 1;
  @%p1 trap;
SKIP:
  ret;
}
"""


def test_trap_is_a_fault_naming_the_line_and_the_thread():
    ptxas(_TRAP, "sm_90a")
    with pytest.raises(sim.SimFault, match=r"^kernel k: trap executed by thread \(5, 0, 0\) of CTA \(1, 0, 0\) "
                                           r"\[PTX line 13: @%p1 trap;\]$"):
        sim.launch(_TRAP, np.zeros(1, np.uint32), grid=(2, 1, 1), block=(32, 1, 1))


def test_a_trap_no_thread_reaches_does_nothing():
    sim.launch(_TRAP, np.zeros(1, np.uint32), grid=(1, 1, 1), block=(32, 1, 1))
