"""Declared register names with ranges kept as ranges.

``.reg .b32 %r<N>;`` declares ``%r0`` .. ``%r{N-1}``. Expanding the names is
linear in ``N``, and ``N`` comes from the input (``%r<999999999>`` is 25
bytes), so the parser and ``check`` keep each range as one entry and answer
lookups by splitting a name into its stem and decimal index.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

__all__ = ["Registers"]

V = TypeVar("V")


class Registers(MutableMapping[str, V], Generic[V]):
    """A mapping from declared register name to a value (its type, say),
    where a range declares all its names at once.

    Example:
        >>> regs = Registers()
        >>> regs.declare("%r", "b32", count=999_999_999)
        >>> regs["%r123456789"], "%r999999999" in regs, "%r01" in regs
        ('b32', False, False)
    """

    def __init__(self) -> None:
        self._names: dict[str, V] = {}
        self._ranges: dict[str, list[tuple[int, V]]] = {}
        self._hits: dict[str, V] = {}       # names found in a range (bounded by the names looked up)

    def declare(self, name: str, value: V, count: int | None = None) -> None:
        """Declare ``name`` (``count`` None) or ``name0`` .. ``name{count-1}``;
        a later declaration of a name wins."""
        if count is None:
            self._names[name] = value
        else:
            self._ranges.setdefault(name, []).append((count, value))
            self._hits.clear()

    def _in_range(self, name: str) -> tuple[bool, V | None]:
        if name in self._hits:
            return True, self._hits[name]
        stem = name.rstrip("0123456789")
        digits = name[len(stem):]
        ranges = self._ranges.get(stem)
        if not ranges or not digits or (len(digits) > 1 and digits[0] == "0"):
            return False, None
        index = int(digits)
        for count, value in reversed(ranges):
            if index < count:
                self._hits[name] = value
                return True, value
        return False, None

    def __getitem__(self, name: str) -> V:
        if name in self._names:
            return self._names[name]
        found, value = self._in_range(name)
        if not found:
            raise KeyError(name)
        return value  # type: ignore[return-value]

    def get(self, name: str, default: V | None = None) -> V | None:  # type: ignore[override]
        """The value of ``name``, or ``default`` when it is not declared."""
        names = self._names
        if name in names:
            return names[name]
        hits = self._hits
        if name in hits:
            return hits[name]
        found, value = self._in_range(name)
        return value if found else default

    def __contains__(self, name: object) -> bool:
        return name in self._names or name in self._hits or \
            (isinstance(name, str) and self._in_range(name)[0])

    def __setitem__(self, name: str, value: V) -> None:
        self._names[name] = value

    def __delitem__(self, name: str) -> None:
        del self._names[name]

    def __iter__(self) -> Iterator[str]:
        """The names declared one by one (a range's names are not listed)."""
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
