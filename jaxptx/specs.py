"""Tensor boundary specs, at the module path the pyptx documentation uses
(``from pyptx.specs import Tile, Layout``): :class:`Tile`, :class:`Layout`,
:func:`unify_envs`, :func:`bind_specs`.

The same objects as ``jaxptx.Tile`` and friends (they live in ``jaxptx.dsl``).

Example:
    >>> from jaxptx.specs import Layout, Tile, unify_envs
    >>> from jaxptx.types import f32
    >>> Tile("M", "K", f32).shape
    ('M', 'K')
    >>> unify_envs([{"M": 4}, {"M": 4, "K": 8}])
    {'M': 4, 'K': 8}
"""

from .dsl import Dim as Dim
from .dsl import Layout as Layout
from .dsl import Tile as Tile
from .dsl import bind_specs as bind_specs
from .dsl import unify_envs as unify_envs

__all__ = ["Dim", "Layout", "Tile", "bind_specs", "unify_envs"]
