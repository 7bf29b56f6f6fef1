"""One launch value: grid, block, cluster and dynamic shared memory,
validated once against CUDA's limits for the target.

A :class:`Launch` is frozen and hashable, so it travels unchanged from
``@kernel`` through tracing (``Specialization.launch``), the JAX primitive's
parameters and the custom call's attributes, and the emulator takes the same
value (:func:`validate_launch`). Constructing one checks everything that does
not depend on the target; :meth:`Launch.check_target` (or
:func:`validate_launch`) adds what does.

The limits, from the CUDA C++ Programming Guide, "Compute Capabilities" >
"Technical Specifications per Compute Capability" (CUDA 12.x/13.0), and the
architecture tuning guides' "Shared Memory" sections:

* grid: x ≤ 2**31 - 1, y ≤ 65535, z ≤ 65535 (every target since sm_30);
* block: x ≤ 1024, y ≤ 1024, z ≤ 64, and x·y·z ≤ 1024 threads;
* every dimension ≥ 1;
* thread block clusters exist from compute capability 9.0; a cluster of at
  most 8 blocks is portable. Larger ("non-portable", up to 16 on H100 and
  B200) clusters need ``cudaFuncAttributeNonPortableClusterSizeAllowed``,
  which jaxptx's launcher does not set, so jaxptx refuses them on every
  target. A grid is made of whole clusters: each grid dimension is a
  multiple of the cluster's;
* statically declared shared memory ≤ 48 KB per block; more needs dynamic
  shared memory and an opt-in (``cudaFuncAttributeMaxDynamicSharedSizeBytes``,
  which the launcher sets), up to the target's maximum per block for static
  plus dynamic together (:data:`MAX_SMEM_PER_BLOCK`): 163 KB on sm_80/87
  (164 KB per SM less 1 KB the driver reserves per block), 99 KB on
  sm_86/89/120/121, 227 KB on sm_90/100/103, 96 KB on sm_70/72, 64 KB on
  sm_75, 48 KB before Volta. KB here is 1024 bytes.

Example:
    >>> from jaxptx.launch import Launch, validate_launch
    >>> Launch(grid=(4096, 65535), block=(32, 32)).grid
    (4096, 65535, 1)
    >>> validate_launch(8, 128, (2,), 64 * 1024, 0, "sm_90a").smem
    65536
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import isa
from .errors import LaunchError

__all__ = ["Launch", "validate_launch", "dim3", "launch_integers", "MAX_GRID", "MAX_BLOCK",
           "MAX_THREADS_PER_BLOCK", "MAX_CLUSTER_SIZE", "CLUSTER_MIN_SM", "MAX_STATIC_SMEM",
           "MAX_SMEM_PER_BLOCK", "TMA_RECORD"]

Dim3 = tuple[int, int, int]

# The C++ handlers check the same limits (LaunchShape in ffi/call_identity.h);
# tests/test_build.py fails when the two disagree.
MAX_GRID: Dim3 = (2**31 - 1, 65535, 65535)
MAX_BLOCK: Dim3 = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
# Portable cluster size; see the module docstring for why not 16.
MAX_CLUSTER_SIZE = 8
CLUSTER_MIN_SM = 90
KB = 1024
MAX_STATIC_SMEM = 48 * KB
# Static + dynamic shared memory per block with the opt-in, by compute
# capability (sm_XX's XX). A target missing here (sm_88, sm_101, sm_110) gets
# the 48 KB every target allows: jaxptx refuses rather than guess.
MAX_SMEM_PER_BLOCK: dict[int, int] = {
    50: 48 * KB, 52: 48 * KB, 53: 48 * KB, 60: 48 * KB, 61: 48 * KB, 62: 48 * KB,
    70: 96 * KB, 72: 96 * KB, 75: 64 * KB,
    80: 163 * KB, 86: 99 * KB, 87: 163 * KB, 89: 99 * KB,
    90: 227 * KB, 100: 227 * KB, 103: 227 * KB,
    120: 99 * KB, 121: 99 * KB,
}
_LARGEST_SMEM = max(MAX_SMEM_PER_BLOCK.values())
# The int64s of one TMA descriptor record in a custom call's ``tma``
# attribute (the fields: jaxptx/jax/_tma.py; the decoder: ffi/tensor_maps.h).
TMA_RECORD = 26
_AXES = "xyz"


def dim3(value: Any, name: str, where: str = "launch") -> Dim3:
    """``value`` (an int, or 1 to 3 ints) as a 3-tuple of ints padded with 1s.

    Numpy integers are accepted and become ints; the limits are not checked
    here (:class:`Launch` checks them).

    Raises:
        LaunchError: not 1 to 3 positive integers.
    """
    dims = (value,) if _is_int(value) else value
    if not (isinstance(dims, (tuple, list)) and 1 <= len(dims) <= 3
            and all(_is_int(d) and d > 0 for d in dims)):
        raise LaunchError(f"{where}: {name}: expected 1 to 3 positive ints like (128, 1, 1), "
                          f"got {value!r}")
    out = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    return out  # type: ignore[return-value]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class Launch:
    """A kernel launch's shape: what ``cuLaunchKernelEx`` takes.

    Each dim is given as an int or 1 to 3 ints and kept as a 3-tuple.
    Constructing a Launch (also through ``dataclasses.replace``) checks every
    limit that holds on all targets; see the module docstring.

    Attributes:
        grid: blocks per grid (x, y, z).
        block: threads per block (x, y, z).
        cluster: blocks per cluster (x, y, z); (1, 1, 1) launches no cluster.
        smem: bytes of dynamic shared memory per block.
        where: what error messages name (``"kernel rms_norm"``); not part of
            the value (not compared or hashed).

    Raises:
        LaunchError: a dim that is not 1 to 3 positive ints, or any limit
            exceeded, naming the argument, the limit and the value given.
    """

    grid: Dim3 = (1, 1, 1)
    block: Dim3 = (1, 1, 1)
    cluster: Dim3 = (1, 1, 1)
    smem: int = 0
    where: str = dataclasses.field(default="launch", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("grid", "block", "cluster"):
            object.__setattr__(self, name, dim3(getattr(self, name), name, self.where))
        if not _is_int(self.smem) or self.smem < 0:
            raise LaunchError(f"{self.where}: smem: expected a byte count >= 0, got {self.smem!r}")
        object.__setattr__(self, "smem", int(self.smem))
        self._check_dims("grid", self.grid, MAX_GRID)
        self._check_dims("block", self.block, MAX_BLOCK)
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise LaunchError(f"{self.where}: block = {self.block} has {self.threads} threads, over "
                              f"CUDA's limit of {MAX_THREADS_PER_BLOCK} threads per block")
        if self.cluster_size > MAX_CLUSTER_SIZE:
            raise LaunchError(
                f"{self.where}: cluster = {self.cluster} has {self.cluster_size} blocks, over "
                f"CUDA's portable limit of {MAX_CLUSTER_SIZE} blocks per cluster (larger, "
                "non-portable clusters need an opt-in jaxptx's launcher does not make)")
        for axis, g, c in zip(_AXES, self.grid, self.cluster):
            if g % c:
                raise LaunchError(f"{self.where}: grid.{axis} = {g} is not a multiple of "
                                  f"cluster.{axis} = {c} (a grid is made of whole clusters)")
        if self.smem > _LARGEST_SMEM:
            raise LaunchError(f"{self.where}: smem = {self.smem} bytes of dynamic shared memory "
                              f"exceeds the most any CUDA target allows per block, "
                              f"{_LARGEST_SMEM} bytes ({_LARGEST_SMEM // KB} KB)")

    def _check_dims(self, name: str, dims: Dim3, limits: Dim3) -> None:
        for axis, d, limit in zip(_AXES, dims, limits):
            if d > limit:
                raise LaunchError(f"{self.where}: {name}.{axis} = {d} exceeds CUDA's limit of {limit}")

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        """Blocks in the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def cluster_size(self) -> int:
        """Blocks per cluster (1: no cluster)."""
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    def with_grid_z(self, z: int) -> Launch:
        """The same launch with grid z = ``z`` (a batch folded into grid z;
        checked against gridDim.z's limit like any launch)."""
        return dataclasses.replace(self, grid=(*self.grid[:2], z))

    def check_target(self, target: isa.Target | str | None, static_smem: int = 0) -> Launch:
        """Check the limits that depend on the target; return ``self``.

        Args:
            target: ``"sm_90a"`` or a Target; None checks what holds on every
                target (static shared memory ≤ 48 KB, and the launch as
                constructed).
            static_smem: bytes of shared memory the kernel declares statically.

        Raises:
            LaunchError: a cluster before sm_90, static shared memory over
                48 KB, or static + dynamic over the target's maximum.
        """
        t = isa.parse_target(target) if isinstance(target, str) else target
        if not _is_int(static_smem) or static_smem < 0:
            raise LaunchError(f"{self.where}: static_smem: expected a byte count >= 0, "
                              f"got {static_smem!r}")
        if t is not None and self.cluster_size > 1 and t.sm < CLUSTER_MIN_SM:
            raise LaunchError(f"{self.where}: cluster = {self.cluster} needs sm_{CLUSTER_MIN_SM} "
                              f"or newer (thread block clusters), target is {t.name}; "
                              "launch without a cluster or pick a newer arch")
        if static_smem > MAX_STATIC_SMEM:
            raise LaunchError(
                f"{self.where}: static shared memory of {static_smem} bytes exceeds CUDA's limit "
                f"of {MAX_STATIC_SMEM} bytes (48 KB) per block; put larger buffers in dynamic "
                "shared memory (extern_smem=True)")
        if t is None:
            return self
        total = static_smem + self.smem
        limit = MAX_SMEM_PER_BLOCK.get(t.sm)
        if limit is None and total > MAX_STATIC_SMEM:
            raise LaunchError(
                f"{self.where}: shared memory of {static_smem} static + {self.smem} dynamic = "
                f"{total} bytes exceeds {MAX_STATIC_SMEM} bytes (48 KB), the most jaxptx knows "
                f"{t.name} allows per block (it has no opt-in maximum for that target)")
        if limit is not None and total > limit:
            raise LaunchError(
                f"{self.where}: shared memory of {static_smem} static + {self.smem} dynamic = "
                f"{total} bytes exceeds {t.name}'s maximum of {limit} bytes "
                f"({limit // KB} KB) per block")
        return self

    def attributes(self) -> dict[str, Any]:
        """The launch as a custom call's typed-FFI attributes: ``grid``,
        ``block``, ``cluster`` (int32 arrays of 3) and ``smem`` (int64)."""
        return dict(grid=np.array(self.grid, np.int32), block=np.array(self.block, np.int32),
                    cluster=np.array(self.cluster, np.int32), smem=np.int64(self.smem))

    @classmethod
    def from_attributes(cls, grid: Any, block: Any, cluster: Any, smem: Any,
                        where: str = "launch attributes") -> Launch:
        """The launch a custom call's attributes describe (the inverse of
        :meth:`attributes`); each dim must have exactly 3 entries.

        Raises:
            LaunchError: a dim of another length, or a launch out of limits.
        """
        dims = []
        for name, value in (("grid", grid), ("block", block), ("cluster", cluster)):
            if not (isinstance(value, (tuple, list, np.ndarray)) and len(value) == 3):
                raise LaunchError(f"{where}: {name}: expected 3 ints, got {value!r}")
            dims.append(tuple(value))
        return cls(*dims, smem, where=where)


def validate_launch(grid: Any, block: Any, cluster: Any, smem: Any, static_smem: int,
                    target: isa.Target | str | None, *, where: str = "launch") -> Launch:
    """The one validated :class:`Launch` for ``target``.

    Args:
        grid, block, cluster: an int or 1 to 3 ints each.
        smem: bytes of dynamic shared memory.
        static_smem: bytes of statically declared shared memory (the
            module's ``.shared`` variables).
        target: the target the kernel runs on (``"sm_90a"``), or None.
        where: what messages name (``"kernel rms_norm"``).

    Raises:
        LaunchError: a malformed dim or any limit exceeded.
    """
    return Launch(grid, block, cluster, smem, where=where).check_target(target, static_smem)


def launch_integers(launch: Any, input_bytes: Sequence[int], output_bytes: Sequence[int],
                    tma: Sequence[int]) -> list[int]:
    """A call's launch as the handlers hash it into its kernel id.

    The order of ``ffi/call_identity.h`` (its ``LaunchShape``, then the
    buffers): grid, block, cluster and smem, the input and output counts,
    their byte sizes, then the TMA record count and the records
    (:data:`TMA_RECORD` int64s each).

    Args:
        launch: a :class:`Launch`, or any object with its four fields (a
            hand-edited call's, unvalidated).
        input_bytes, output_bytes: each buffer's size in bytes.
        tma: the call's ``tma`` attribute (whole records).

    Returns:
        The integers, in that order.
    """
    return [*launch.grid, *launch.block, *launch.cluster, launch.smem,
            len(input_bytes), len(output_bytes), *map(int, input_bytes), *map(int, output_bytes),
            len(tma), *map(int, tma)]
