"""The emulator's instruction semantics, one module per family.

Importing this package registers every family's functions in
:data:`.registry.SEMANTICS`:

============== =========================================================
module          instructions
============== =========================================================
``arith``       integer arithmetic; dispatch of add/sub/min/max... to floats
``float_arith`` floating-point mul, fma, div, copysign and the float halves
``approx``      rcp, sqrt, rsqrt, sin, cos, lg2, ex2, tanh
``logic``       logic, shifts, bit manipulation, prmt
``compare``     setp, set, selp, slct
``convert``     mov, cvt, cvt.pack, cvta
``memory``      ld, st, cp.async, createpolicy
``atomics``     atom, atom.cas, red
``multimem``    multimem.ld_reduce, multimem.st, multimem.red (on a ``jaxptx.sim.System``)
``warp``        shfl, vote, redux, match, elect, activemask
``mma``         mma.sync (fragments in ``fragments``)
``matrix_ldst`` ldmatrix, stmatrix (every shape and source format)
``wgmma``       wgmma.mma_async and its fence / commit / wait
``wmma``        wmma.load, wmma.store, wmma.mma
``tcgen05_mma`` tcgen05.mma{.ws} (descriptors in ``tcgen05_idesc``/``tcgen05_smem``,
                operands and layouts in ``tcgen05_operands``)
``tcgen05``     tcgen05.alloc/dealloc/relinquish_alloc_permit, commit, wait, fence
                (tensor memory in ``jaxptx.sim.memory.tmem``)
``tcgen05_move`` tcgen05.ld, tcgen05.st, tcgen05.cp, tcgen05.shift
``mbarrier``    mbarrier.*, cp.async.mbarrier.arrive
``cluster``     mapa, getctarank
``clc``         clusterlaunchcontrol.try_cancel / query_cancel (cluster launch control)
``griddep``     griddepcontrol.launch_dependents / wait (programmatic dependent launch)
``bulk_copy``   cp.async.bulk
``tma``         cp.async.bulk.tensor (TMA), tensormap.*
``video``       the scalar and SIMD video instructions
============== =========================================================
"""

from . import (approx, arith, atomics, bulk_copy, clc, cluster, compare, convert, float_arith, griddep,  # noqa: F401
               logic, matrix_ldst, mbarrier, memory, mma, multimem, tcgen05, tcgen05_mma, tcgen05_move, tma, video,
               warp, wgmma, wmma)
from .registry import MACHINE, NO_OPS, SEMANTICS, UNSUPPORTED

__all__ = ["SEMANTICS", "MACHINE", "NO_OPS", "UNSUPPORTED"]
