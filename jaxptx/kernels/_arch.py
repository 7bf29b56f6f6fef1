"""Which variant of a library op runs: ``arch="auto" | "sm_80" | "sm_90a" | "sm_100a"``.

``"auto"`` resolves as a kernel's ``arch="auto"`` does (the GPU present,
else ``JAXPTX_ARCH``, else ``sm_90a``), then picks the newest variant the
target can run: sm_100a gets the Blackwell variant, sm_90a the Hopper one,
anything else from sm_80 up (sm_90 without ``a``, sm_120) the Ampere one,
whose ``mma.sync`` every later GPU runs.
"""

from __future__ import annotations

from .. import isa
from ..dsl import AUTO_FALLBACK_ARCH
from ..errors import SpecError
from ..runtime import detect_arch

__all__ = ["VARIANTS", "variant", "target_of"]

# The variants a library op is written for, oldest first.
VARIANTS = ("sm_80", "sm_90a", "sm_100a")


def target_of(arch: str) -> isa.Target:
    """The target ``arch`` names; ``"auto"`` as ``@kernel(arch="auto")`` resolves it.

    Raises:
        SpecError: ``arch`` is not ``"auto"`` or an ``sm_XX`` name.
    """
    if arch == "auto":
        return isa.parse_target(detect_arch() or AUTO_FALLBACK_ARCH)
    try:
        return isa.parse_target(arch)
    except Exception as e:  # noqa: BLE001 - reworded with the argument's name
        raise SpecError(f"arch: expected 'auto' or one of {', '.join(VARIANTS)}, got {arch!r} ({e})") from None


def variant(arch: str, op: str, available: tuple[str, ...] = VARIANTS) -> str:
    """The variant of ``op`` to run for ``arch``: one of ``available``.

    An explicit name must be one of ``available``; ``"auto"`` takes the
    newest available variant the resolved target can run (``wgmma`` needs
    exactly sm_90a and ``tcgen05`` sm_100a, so an op without a Blackwell
    variant runs its Ampere one on sm_100a).

    Raises:
        SpecError: ``arch`` names no variant of ``op``, or a target older than sm_80.
    """
    if arch != "auto":
        if arch not in available:
            raise SpecError(f"{op}: arch={arch!r} is not a variant of {op}; expected 'auto' or "
                            f"one of {', '.join(repr(a) for a in available)}")
        return arch
    target = target_of(arch)
    if target.sm < 80:
        raise SpecError(f"{op}: the GPU's target {target.name} is older than sm_80, the oldest "
                        f"{op} supports")
    if target.sm == 100 and target.suffix in ("a", "f") and "sm_100a" in available:
        return "sm_100a"
    if target.sm == 90 and target.suffix == "a" and "sm_90a" in available:
        return "sm_90a"
    return "sm_80"
