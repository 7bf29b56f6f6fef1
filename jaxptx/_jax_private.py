"""Every private JAX name jaxptx uses, in one place.

jaxptx reaches into ``jax._src`` only where JAX has no public API yet. Each
use is listed in :data:`USES` with why it is needed; other modules import
these names from here, never from ``jax._src`` directly. The names were
checked against the JAX releases in :data:`CHECKED_JAX`;
:func:`problems` re-checks them against the installed JAX (the test
``tests/test_jax_private.py`` fails, naming each one, when a release
renames, removes or changes one of them), so a new JAX is found out by the
test suite rather than by a user.

Importing this module imports jax.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple

from jax._src import core as core  # varying manual axes (shard_map) have no public API
from jax._src import dispatch as dispatch  # devices needed at lowering: no public API
from jax._src import sharding_impls as sharding_impls  # axis contexts: no public API

__all__ = ["core", "dispatch", "sharding_impls", "CHECKED_JAX", "SOURCE_CHECKED_JAX", "USES", "Use",
           "problems"]

# The JAX releases the test suite ran on with these names.
CHECKED_JAX = ("0.10.2",)
# Releases whose source was read for every name of USES (and the ShapedArray
# keywords jaxptx/jax/_primitive.py passes), without running the suite:
# pip serves no jax >= 0.11 on our machines (0.11 needs Python >= 3.12). jax
# 0.12's source was not available to us; the first run on it is
# test_private_jax_names_still_hold, which names the name and both versions.
SOURCE_CHECKED_JAX = {
    "0.11.0": "jax-ml/jax tag jax-v0.11.0",
    "0.11.1.dev": "jax-ml/jax main at cec06d116c (version.py 0.11.1)",
}


class Use(NamedTuple):
    """One private name: ``module.attribute``, what it must be (``"class"``,
    ``"callable"``, ``"set"``), the keyword parameters or fields jaxptx uses,
    where jaxptx uses it and why."""

    module: str
    attribute: str
    kind: str
    uses: tuple[str, ...]
    where: str
    why: str


USES: tuple[Use, ...] = (
    Use("core", "get_cur_mesh_sharding", "callable", (), "jaxptx/jax/_primitive.py",
        "the sharding of a kernel output inside shard_map"),
    Use("core", "ManualAxisType", "class", ("varying",), "jaxptx/jax/_primitive.py",
        "the manual axes a kernel output varies over (jax >= 0.10; older: vma=)"),
    Use("dispatch", "prim_requires_devices_during_lowering", "set", (),
        "jaxptx/jax/_primitive.py",
        "a shardable kernel's custom_partitioning needs the devices at lowering"),
    Use("sharding_impls", "ShardingContext", "class", ("num_devices",),
        "jaxptx/jax/_partition.py", "whether a lowering spans several devices (auto mode)"),
    Use("sharding_impls", "SPMDAxisContext", "class", ("mesh", "manual_axes"),
        "jaxptx/jax/_partition.py", "the manual axes of a lowering inside shard_map"),
)

_MODULES = {"core": core, "dispatch": dispatch, "sharding_impls": sharding_impls}


def _fields(cls: type) -> set[str]:
    """The names a class's instances carry: dataclass fields, ``__init__``
    parameters and properties."""
    names = set(getattr(cls, "__dataclass_fields__", {}))
    try:
        names |= set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        pass
    return names | {n for n, v in inspect.getmembers(cls) if isinstance(v, property)}


def problems() -> list[str]:
    """What no longer holds in the installed JAX, one line per name; empty
    when every name of :data:`USES` is there and of the expected kind."""
    import jax

    out = []
    for use in USES:
        name = f"jax._src.{use.module}.{use.attribute}"
        value: Any = getattr(_MODULES[use.module], use.attribute, None)
        checked = ", ".join([*CHECKED_JAX, *SOURCE_CHECKED_JAX])
        where = f" (used by {use.where}: {use.why}; checked against jax {checked}," \
                f" installed {jax.__version__})"
        if value is None:
            out.append(f"{name} is gone{where}")
        elif use.kind == "class" and not isinstance(value, type):
            out.append(f"{name} is no longer a class{where}")
        elif use.kind == "callable" and not callable(value):
            out.append(f"{name} is no longer callable{where}")
        elif use.kind == "set" and not isinstance(value, set):
            out.append(f"{name} is no longer a set{where}")
        elif use.kind == "class":
            missing = [f for f in use.uses if f not in _fields(value)]
            if missing:
                out.append(f"{name} has no {', '.join(missing)}{where}")
    return out
