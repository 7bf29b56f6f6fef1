"""The one mapping between PTX spellings and Python attribute names.

Rule (applied to each dot-separated part of an instruction name):

* ``::`` is written ``__``: ``shared::cta`` → ``shared__cta``;
* a part that starts with a digit gets a leading ``_``: ``2d`` → ``_2d``,
  ``32x32b`` → ``_32x32b``;
* a part that is a Python keyword gets a trailing ``_``: ``global`` →
  ``global_``, ``async`` → ``async_``, ``and`` → ``and_``.

So ``cp.async.bulk.tensor.2d.shared::cluster.global`` is written
``ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_``.
"""

from __future__ import annotations

import functools
import keyword

__all__ = ["to_python", "to_ptx"]


def to_python(part: str) -> str:
    """PTX name part → Python attribute name."""
    name = part.replace("::", "__")
    if name[:1].isdigit():
        name = "_" + name
    if keyword.iskeyword(name) or name in ("not", "and", "or"):
        name += "_"
    return name


@functools.lru_cache(maxsize=4096)
def to_ptx(name: str) -> str:
    """Python attribute name → PTX name part (inverse of :func:`to_python`)."""
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    if name.startswith("_") and name[1:2].isdigit():
        name = name[1:]
    return name.replace("__", "::")
