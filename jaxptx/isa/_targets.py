"""PTX targets (``sm_XX``, ``sm_XXa``, ``sm_XXf``) and PTX ISA versions.

Facts from the PTX ISA release notes ("PTX ISA Version" table and
"Target ISA Notes"): the first PTX version that knows each target.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import PtxTargetError, PtxVersionError

__all__ = ["Target", "Requires", "parse_target", "parse_version",
           "default_version", "MIN_PTX_FOR_SM", "NEWEST_PTX", "SM100_FAMILY"]

# First PTX ISA version that supports each base target.
MIN_PTX_FOR_SM: dict[int, tuple[int, int]] = {
    10: (1, 0), 11: (1, 0), 12: (1, 2), 13: (1, 2), 20: (2, 0), 21: (2, 0), 30: (3, 0),
    32: (4, 0), 35: (3, 1), 37: (4, 1), 50: (4, 0), 52: (4, 1), 53: (4, 2), 60: (5, 0), 61: (5, 0), 62: (5, 0),
    70: (6, 0), 72: (6, 1), 75: (6, 3), 80: (7, 0), 86: (7, 1), 87: (7, 4),
    88: (9, 0), 89: (7, 8), 90: (7, 8), 100: (8, 6), 101: (8, 6), 103: (8, 8),
    110: (9, 0), 120: (8, 7), 121: (8, 8),
}
# Arch-specific ("a") variants need these versions where they differ.
_MIN_PTX_ARCH_SPECIFIC: dict[int, tuple[int, int]] = {90: (8, 0)}
# Family-specific ("f") variants arrived with PTX 8.8.
_MIN_PTX_FAMILY = (8, 8)
# The newest PTX our GPU fleet's driver (CUDA 13.0) JIT-compiles, and the
# newest the pinned ptxas 13.0 reads.
NEWEST_PTX = (9, 0)
# What jaxptx writes when the kernel names no version: recent enough for the
# features people reach for (PTX 8.5 = CUDA 12.5), never below the target's
# minimum.
_DEFAULT_FLOOR = (8, 5)

# Targets that have the sm_100-family tensor-memory instructions (tcgen05).
SM100_FAMILY = ("sm_100a", "sm_101a", "sm_103a", "sm_110a",
                "sm_100f", "sm_101f", "sm_103f", "sm_110f")

_TARGET_RE = re.compile(r"^sm_(\d+)([af]?)$")


@dataclasses.dataclass(frozen=True, order=True)
class Target:
    """A compile target such as ``sm_90a``.

    Attributes:
        sm: the compute capability as an integer (``90``).
        suffix: ``""``, ``"a"`` (arch-specific) or ``"f"`` (family-specific).
    """

    sm: int
    suffix: str = ""

    @property
    def name(self) -> str:
        """``sm_90a`` spelling."""
        return f"sm_{self.sm}{self.suffix}"

    @property
    def min_ptx(self) -> tuple[int, int]:
        """The first PTX ISA version that knows this target."""
        base = MIN_PTX_FOR_SM.get(self.sm, NEWEST_PTX)
        if self.suffix == "a":
            return max(base, _MIN_PTX_ARCH_SPECIFIC.get(self.sm, base))
        if self.suffix == "f":
            return max(base, _MIN_PTX_FAMILY)
        return base

    def __str__(self) -> str:
        return self.name


def parse_target(arch: str | Target) -> Target:
    """Parse ``"sm_90a"`` into a :class:`Target`.

    Raises:
        PtxTargetError: not of the form ``sm_<number>[a|f]``, or a target
            no PTX version knows.
    """
    if isinstance(arch, Target):
        return arch
    m = _TARGET_RE.match(arch) if isinstance(arch, str) else None
    if m is None:
        raise PtxTargetError(
            f"arch: expected a target like 'sm_80', 'sm_90a' or 'sm_100a', got {arch!r}")
    sm = int(m.group(1))
    if sm not in MIN_PTX_FOR_SM:
        known = ", ".join(f"sm_{k}" for k in MIN_PTX_FOR_SM)
        raise PtxTargetError(f"arch: unknown target {arch!r}; known targets: {known}")
    return Target(sm, m.group(2))


def parse_version(version: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """Parse ``"8.5"`` or ``(8, 5)`` into ``(8, 5)``; ``None`` passes through.

    Raises:
        PtxVersionError: not a ``major.minor`` pair of small integers.
    """
    if version is None:
        return None
    if isinstance(version, str):
        major, dot, minor = version.partition(".")
        if dot and major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    elif (isinstance(version, tuple) and len(version) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in version)):
        return version
    raise PtxVersionError(f"version: expected a PTX ISA version like (8, 5) or '8.5', got {version!r}")


def default_version(target: Target) -> tuple[int, int]:
    """The PTX version jaxptx writes for ``target`` when none is given."""
    return max(target.min_ptx, _DEFAULT_FLOOR)


@dataclasses.dataclass(frozen=True)
class Requires:
    """What a form, or one modifier value, needs from the target.

    Attributes:
        sm: minimum compute capability (``80`` means sm_80 and newer).
        ptx: minimum PTX ISA version.
        only: if non-empty, the exact targets that have it (arch-specific
            features like ``wgmma`` on ``sm_90a`` only).
    """

    sm: int = 0
    ptx: tuple[int, int] = (1, 0)
    only: tuple[str, ...] = ()

    def describe(self) -> str:
        """``sm_90a`` / ``sm_80 or newer`` for messages."""
        if self.only:
            return " or ".join(self.only)
        return f"sm_{self.sm} or newer"

    def allows(self, target: Target, version: tuple[int, int]) -> bool:
        """Whether ``target``/``version`` meet this requirement."""
        if self.only:
            ok = target.name in self.only
        else:
            ok = target.sm >= self.sm
        return ok and version >= self.ptx

    def check(self, what: str, target: Target, version: tuple[int, int]) -> None:
        """Raise if ``target``/``version`` lack this requirement.

        Raises:
            PtxTargetError: wrong or too old target; names the one to use.
            PtxVersionError: PTX version too old; names the one to pass.
        """
        if self.only and target.name not in self.only:
            raise PtxTargetError(
                f"{what} needs {self.describe()}, kernel targets {target.name}; "
                f"pass arch={self.only[0]!r}")
        if not self.only and target.sm < self.sm:
            raise PtxTargetError(
                f"{what} needs {self.describe()}, kernel targets {target.name}; "
                f"pass arch='sm_{self.sm}' or newer")
        if version < self.ptx:
            raise PtxVersionError(
                f"{what} needs PTX ISA {self.ptx[0]}.{self.ptx[1]}, kernel declares "
                f"{version[0]}.{version[1]}; pass version={self.ptx}")
