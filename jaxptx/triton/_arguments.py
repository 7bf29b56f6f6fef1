"""The arguments of :func:`~jaxptx.triton.triton_call` that are not the kernel's, checked.

Each function takes the value given and says, on a bad one, which argument,
what was expected and what came (a ``SpecError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..errors import SpecError

__all__ = ["backend_options", "outputs", "aliases", "zeroed", "grid"]

# The options triton_call takes as arguments, with jax-triton's defaults.
DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1}


def backend_options(where: str, backend_options: Mapping[str, Any] | None,
                     **explicit: Any) -> dict[str, Any]:
    """Triton's compile options: ``backend_options`` with the explicit ones merged in."""
    options = dict(backend_options or {})
    given = {k: v for k, v in explicit.items()
             if v is not None and not (k == "debug" and v is False)}
    both = sorted(given.keys() & options.keys())
    if both:
        raise SpecError(f"{where}: {', '.join(both)} given both as an argument and in "
                        f"backend_options; give each once")
    options.update(given)
    for k, v in DEFAULTS.items():
        options.setdefault(k, v)
    for k in DEFAULTS:
        v = options[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{where}: {k}: expected an int >= 1, got {v!r}")
    if options["num_warps"] & (options["num_warps"] - 1):
        raise SpecError(f"{where}: num_warps: expected a power of 2, got {options['num_warps']}")
    for k, v in options.items():
        try:
            hash(v)
        except TypeError:
            raise SpecError(f"{where}: backend_options[{k!r}]: expected a hashable value, "
                            f"got {v!r}") from None
    return options


def outputs(where: str, out_type: Any, out_shape: Any) -> tuple[list[Any], Any]:
    """The outputs' ``ShapeDtypeStruct`` leaves and their tree."""
    if out_type is not None and out_shape is not None:
        raise SpecError(f"{where}: out_type and out_shape given; they are one argument "
                        f"(out_shape is its older name), give one")
    out = out_type if out_type is not None else out_shape
    if out is None:
        raise SpecError(f"{where}: out_type missing: expected a jax.ShapeDtypeStruct (or a "
                        f"pytree of them) per output")
    leaves, tree = jax.tree.flatten(out)
    if not leaves:
        raise SpecError(f"{where}: out_type has no outputs; expected a jax.ShapeDtypeStruct "
                        f"(or a pytree of them) per output")
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise SpecError(f"{where}: out_type: expected jax.ShapeDtypeStruct leaves (anything "
                            f"with .shape and .dtype), got {type(leaf).__name__} {leaf!r:.60}")
    return [jax.ShapeDtypeStruct(tuple(x.shape), x.dtype) for x in leaves], tree


def aliases(where: str, aliases: Mapping[int, int] | None, n_out: int) -> dict[int, int]:
    """``input_output_aliases`` checked: ints, one operand per output, outputs in range."""
    if not aliases:
        return {}
    if not isinstance(aliases, Mapping):
        raise SpecError(f"{where}: input_output_aliases: expected a dict {{operand index: output "
                        f"index}}, got {type(aliases).__name__}")
    out = {}
    for i, j in aliases.items():
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (i, j)):
            raise SpecError(f"{where}: input_output_aliases: expected int keys and values, "
                            f"got {dict(aliases)!r}")
        if not 0 <= j < n_out:
            raise SpecError(f"{where}: input_output_aliases {dict(aliases)!r}: output {j}, but "
                            f"out_type has {n_out} output(s)")
        out[int(i)] = int(j)
    if len(set(out.values())) != len(out):
        raise SpecError(f"{where}: input_output_aliases {dict(aliases)!r}: two operands alias "
                        f"one output; expected one operand per output")
    return out


def zeroed(where: str, zeroed: Any, meta: Mapping[str, Any], n_out: int) -> tuple[int, ...]:
    """``zeroed_outputs`` (or what the function of the metaparams returns), checked."""
    if callable(zeroed):
        zeroed = zeroed(dict(meta))
    try:
        out = tuple(zeroed)
    except TypeError:
        raise SpecError(f"{where}: zeroed_outputs: expected output indices (or a function of "
                        f"the meta-parameters returning them), got {zeroed!r}") from None
    if any(isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < n_out
           for j in out) or len(set(out)) != len(out):
        raise SpecError(f"{where}: zeroed_outputs: expected distinct output indices "
                        f"(0..{n_out - 1}), got {out!r}")
    return tuple(int(j) for j in out)


def grid(where: str, grid: Any, meta: Mapping[str, Any]) -> tuple[int, int, int]:
    """The grid in programs, ``(x, y, z)``: an int, 1 to 3 ints, or a function
    of the metaparams returning either."""
    given = grid
    if callable(grid):
        grid = grid(dict(meta))
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or not all(
            isinstance(g, (int, np.integer)) and not isinstance(g, bool) for g in grid):
        came = f"{given!r} returned {grid!r}" if callable(given) else repr(grid)
        raise SpecError(f"{where}: grid: expected an int, a tuple of 1 to 3 ints, or a function "
                        f"of the meta-parameters returning one, got {came:.120}")
    if any(g < 1 for g in grid):
        raise SpecError(f"{where}: grid: expected extents >= 1, got {tuple(grid)}")
    x, y, z = (*map(int, grid), 1, 1)[:3]
    return x, y, z
