"""``pyptx.types``: the PTX types (jaxptx's :mod:`jaxptx.types`)."""

from ..types import *  # noqa: F401,F403
from ..types import PtxType as PtxType
