"""A kernel's launch: what decoration knows of it, and a specialisation's
(the grid function resolved for the bound values, validated for the target
with the module's static shared memory)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .. import ir, isa
from ..errors import LaunchError, SpecError
from ..launch import Launch, dim3, validate_launch
from ._assemble import static_shared_bytes

__all__ = ["decoration_launch", "specialization_launch"]


def decoration_launch(where: str, arch: str, grid: Any, block: Any, cluster: Any, smem: Any,
                      reqntid: tuple[int, int, int] | None) -> Launch:
    """The launch as far as decoration knows it, checked now so a bad option
    fails where the kernel is defined. A grid function's grid is known only
    at trace; until then the smallest grid the cluster allows stands in, and
    it is the grid of a kernel given none. ``block`` defaults to ``reqntid``,
    and must equal it when both are given."""
    cluster = dim3(cluster, "cluster", where)
    block = dim3((reqntid or (1, 1, 1)) if block is None else block, "block", where)
    launch = Launch(cluster if grid is None or callable(grid) else grid, block, cluster, smem,
                    where=where)
    if reqntid is not None and block != reqntid:
        raise LaunchError(f"{where}: block = {block} differs from reqntid = {reqntid}; a launch "
                          "with another block than .reqntid fails (give one of them)")
    if arch != "auto":
        launch.check_target(arch)
    return launch


def specialization_launch(name: str, grid: Any, declared: Launch, target: isa.Target, smem: int,
                          module: ir.Module, env: Mapping[str, Any], validate: bool) -> Launch:
    """The launch of one specialisation.

    Args:
        name: the kernel's name, for messages.
        grid: the ``grid`` option (None, a dim3, or a function of dims and
            template values).
        declared: the launch checked at decoration (block, cluster).
        target: the target traced for.
        smem: dynamic shared memory bytes.
        module: the traced module (its static shared memory counts).
        env: the bound dims and template values.
        validate: False for a module reproduced as written (transpiled PTX
            ptxas may reject): its declarations go unchecked.

    Raises:
        SpecError: a grid function needs a value ``env`` lacks.
        LaunchError: the launch is outside CUDA's limits for ``target``.
    """
    where = _grid_where(name, grid, env)
    static = static_shared_bytes(module) if validate else 0
    return validate_launch(_resolve_grid(name, grid, declared, env, where), declared.block,
                           declared.cluster, smem, static, target, where=where)


def _resolve_grid(name: str, grid: Any, declared: Launch, env: Mapping[str, Any],
                  where: str) -> tuple[int, int, int]:
    if grid is None:  # one cluster (one block without a cluster)
        return declared.cluster
    if not callable(grid):
        return grid
    params = inspect.signature(grid).parameters
    missing = [p for p in params if p not in env]
    if missing:
        raise SpecError(f"kernel {name}: grid needs {missing}; pass "
                        f"{', '.join(m + '=...' for m in missing)} to .ptx()")
    return dim3(grid(**{p: env[p] for p in params}), "grid", where)


def _grid_where(name: str, grid: Any, env: Mapping[str, Any]) -> str:
    """What launch errors name: ``kernel k``, and for a grid function
    the values it was given (``kernel k (grid for N=4096)``)."""
    if not callable(grid):
        return f"kernel {name}"
    given = [f"{p}={env[p]!r}" for p in inspect.signature(grid).parameters if p in env]
    return f"kernel {name} (grid for {', '.join(given)})"
