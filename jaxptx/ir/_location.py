"""Where a node came from: a typed location every error and finding reads.

A parsed node carries a :class:`PtxLocation` (its source's name, 1-based
line and column); a traced node a :class:`PythonLocation` (the user's
file and line). Both are tuples, so ``loc[1]`` is the line either way;
:func:`jaxptx.emit.source_map` gives a traced node's PTX line in the text
``emit`` writes.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Union

__all__ = ["Location", "PtxLocation", "PythonLocation", "ptx_line", "python_location"]


class PtxLocation(NamedTuple):
    """A position in PTX text (1-based line and column)."""

    source: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"PTX line {self.line}"


class PythonLocation(NamedTuple):
    """The Python line that traced a node."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


Location = Union[PtxLocation, PythonLocation]
"""What a node's ``loc`` holds (``None``: a node built by hand)."""


def ptx_line(loc: object) -> int | None:
    """The PTX line of a node's ``loc``, when it is a position in PTX text."""
    return loc[1] if isinstance(loc, tuple) and len(loc) == 3 else None


def python_location(loc: object) -> PythonLocation | None:
    """The Python line of a node's ``loc``, when it was traced."""
    if isinstance(loc, tuple) and len(loc) == 2:
        return loc if isinstance(loc, PythonLocation) else PythonLocation(*loc)
    return None
