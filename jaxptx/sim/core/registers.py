"""The machine's registers: the register file (allocated on first use) and
the special registers computed from thread indices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .host import ShapeCache
from ..errors import SimError
from ..numerics.values import bits_dtype

if TYPE_CHECKING:
    from ..core.view import MachineView

__all__ = ["RegisterFile", "SpecialRegisters", "register_dtypes"]


def register_dtypes(types: Mapping[str, Any]) -> dict[str, np.dtype]:
    """The storage dtype of each declared register (``types``: name → PTX type)."""
    return {name: bits_dtype(t) for name, t in types.items()}


class RegisterFile:
    """The register file: one bits array per declared register, allocated on
    first use (a register first written by every thread never needs zeroing).

    Args:
        types: register name → PTX type.
        n: threads.
        dtypes: :func:`register_dtypes` of ``types``, when the caller keeps
            it across launches (read, never changed, here).
    """

    def __init__(self, types: Mapping[str, Any], n: int, dtypes: dict[str, np.dtype] | None = None) -> None:
        self.dtypes = register_dtypes(types) if dtypes is None else dtypes
        self.n = n
        self.arrays: dict[str, np.ndarray] = {}
        # id of the memory each register array lives in: an array is adopted
        # as a register only if no register holds its memory already.
        self._roots: dict[str, int] = {}
        self._held: set[int] = set()

    def get(self, name: str) -> np.ndarray | None:
        """Register ``name``'s bits (``None`` if no such register)."""
        arr = self.arrays.get(name)
        if arr is None:
            dtype = self.dtypes.get(name)
            if dtype is None:
                return None
            arr = np.zeros(self.n, dtype=dtype)
            self._hold(name, arr, id(arr))
        return arr

    def replace(self, name: str, bits: np.ndarray) -> None:
        """Every thread writes ``name``. A freshly computed array (writeable,
        no register's memory) becomes the register; anything else is copied."""
        dtype = self.dtypes[name]
        if bits.dtype == dtype and bits.shape == (self.n,):
            base = bits.base
            root = bits if base is None else base
            key = id(root)
            flags = bits.flags
            if key not in self._held and flags.writeable and flags.c_contiguous and type(root) is np.ndarray \
                    and (root is bits or (root.base is None and root.nbytes == bits.nbytes)):
                self._hold(name, bits, key)         # fresh: the register takes it
            else:
                arr = bits.copy()
                self._hold(name, arr, id(arr))
            return
        arr = self.get(name)
        arr[:] = bits

    def _hold(self, name: str, arr: np.ndarray, key: int) -> None:
        """``arr`` becomes register ``name``; ``key`` is the id of the memory it lives in."""
        roots = self._roots
        old = roots.get(name)
        if old is not None:
            self._held.discard(old)
        self.arrays[name] = arr
        roots[name] = key
        self._held.add(key)

    def __getitem__(self, name: str) -> np.ndarray:
        arr = self.get(name)
        if arr is None:
            raise KeyError(name)
        return arr

    def __contains__(self, name: object) -> bool:
        return name in self.dtypes

    def __iter__(self):
        return iter(self.dtypes)


# (name, grid, block) -> the value of a launch-constant special register for
# every thread: launches of one shape share them.
_SHARED = ShapeCache()


class SpecialRegisters:
    """``%tid.x``, ``%laneid``, ``%ctaid.y`` ... computed from thread indices
    (once per launch for the ones that never change)."""

    _CONSTANT = ("tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid", "lanemask_eq",
                 "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge")

    def __init__(self, m: "MachineView") -> None:
        self.m = m
        self.cache: dict[str, np.ndarray] = {}

    def read(self, name: str, threads: np.ndarray) -> np.ndarray:
        if name[1:].partition(".")[0] not in self._CONSTANT:
            return self.compute(name, threads)
        every = self.cache.get(name)
        if every is None:
            key = (name, self.m.grid, self.m.block)
            every = _SHARED.get(key)
            if every is None:
                every = _SHARED.put(key, self.compute(name, self.m.all_threads))
            self.cache[name] = every
        return every if len(threads) == self.m.nthreads else every[threads]

    def compute(self, name: str, threads: np.ndarray) -> np.ndarray:
        m = self.m
        base, _, comp = name[1:].partition(".")
        axis = "xyz".index(comp) if comp in ("x", "y", "z") else 0
        cta, tid = np.divmod(threads, m.ntid)
        bx, by, _ = m.block
        gx, gy, _ = m.grid
        if base == "tid":
            v = (tid % bx, (tid // bx) % by, tid // (bx * by))[axis]
        elif base == "ntid":
            v = np.full(len(threads), m.block[axis])
        elif base == "ctaid":
            v = (cta % gx, (cta // gx) % gy, cta // (gx * gy))[axis]
        elif base == "nctaid":
            v = np.full(len(threads), m.grid[axis])
        elif base == "laneid":
            v = tid % 32
        elif base == "warpid":
            v = tid // 32
        elif base == "nwarpid":
            v = np.full(len(threads), m.warps_per_cta)
        elif base in ("lanemask_eq", "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge"):
            lane = (tid % 32).astype(np.uint64)
            one = np.uint64(1) << lane
            v = {"lanemask_eq": one, "lanemask_lt": one - np.uint64(1), "lanemask_le": (one << np.uint64(1)) - np.uint64(1),
                 "lanemask_gt": ~((one << np.uint64(1)) - np.uint64(1)), "lanemask_ge": ~(one - np.uint64(1))}[base]
            v = v & np.uint64(0xFFFFFFFF)
        elif base in ("clock", "clock64", "globaltimer"):
            # The machine's step count: it advances, so a loop that waits for
            # time to pass ends (and is not a loop that changes nothing).
            v = np.full(len(threads), m.steps * (1000 if base == "globaltimer" else 1), dtype=np.uint64)
        elif base in ("smid", "gridid", "nsmid"):
            v = np.zeros(len(threads))
        elif base == "dynamic_smem_size":
            v = np.full(len(threads), m.dynamic_smem)
        elif base == "total_smem_size":
            v = np.full(len(threads), m.memory.shared_size)
        elif base in ("cluster_ctarank", "cluster_nctarank", "cluster_ctaid", "cluster_nctaid",
                      "clusterid", "nclusterid"):
            v = m.cluster_register(base, axis, cta)
        else:
            raise SimError(f"the emulator does not know the special register {name}")
        width = 64 if base in ("clock64", "globaltimer", "gridid") else 32
        return np.asarray(v).astype(np.uint64 if width == 64 else np.uint32)  # %clock wraps at 2^32

