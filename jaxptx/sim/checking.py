"""``checking()``: turn the sanitizer on for launches that do not ask for it
themselves — the CPU path of ``jax.jit``, where no ``check=`` argument
reaches the emulator.

    with jaxptx.sim.checking():          # or checking("strict"), checking("all")
        y = jax.jit(f)(x)                # every kernel launch runs checked

The environment variable ``JAXPTX_SIM_CHECK`` (``1``, ``strict`` or ``all``;
``0`` or unset: off; anything else is an error) does the same for a whole
process. Findings under ``jax.jit`` arrive as a
Python error naming the kernel (in ``"all"`` mode, every finding).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from .core.progress import setting
from .errors import SimError

__all__ = ["checking", "check_mode", "valid_mode"]

_MODES = (False, True, "strict", "all")
_state = threading.local()
_global: list[Any] = []          # modes of the checking() blocks open in any thread


def valid_mode(check: Any, where: str = "launch check") -> Any:
    """``check`` if it is a sanitizer mode (False, True, "strict", "all").

    Raises:
        SimError: anything else, naming the modes.
    """
    if isinstance(check, bool) or check in ("strict", "all"):
        return check
    raise SimError(f"{where}: expected False, True, 'strict' or 'all', got {check!r}")


@contextlib.contextmanager
def checking(mode: Any = True) -> Iterator[None]:
    """Run every emulator launch in the block under the sanitizer in
    ``mode`` (``True``: raise at the first finding; ``"strict"``: also
    same-value stores by several threads; ``"all"``: collect every finding
    and raise them together). Applies to launches from any thread while the
    block is open (XLA runs CPU custom calls on its own threads)."""
    valid_mode(mode, "checking")
    _global.append(mode)
    try:
        yield
    finally:
        _global.remove(mode)


CHECK_ENV = "JAXPTX_SIM_CHECK"
# JAXPTX_SIM_CHECK's values and the modes they mean.
_ENV_MODES = {"": False, "0": False, "false": False, "1": True, "true": True,
             "strict": "strict", "all": "all"}


def check_mode() -> Any:
    """The mode for a launch that did not choose one: the innermost open
    :func:`checking` block, else ``JAXPTX_SIM_CHECK`` (``0``/``false``,
    ``1``/``true``, ``strict`` or ``all``; unset or empty: off), else False.

    Raises:
        SimError: ``JAXPTX_SIM_CHECK`` has another value.
    """
    if _global:
        return _global[-1]
    return setting(CHECK_ENV, _env_mode)


def _env_mode(raw: str | None) -> Any:
    """:func:`check_mode`'s reading of ``JAXPTX_SIM_CHECK`` (value ``raw``)."""
    raw = raw or ""
    mode = _ENV_MODES.get(raw.strip().lower())
    if mode is None:
        accepted = ", ".join(repr(v) for v in _ENV_MODES if v)
        raise SimError(f"JAXPTX_SIM_CHECK={raw!r}: expected one of {accepted} (or unset/empty "
                       "for no checking); unset it or set JAXPTX_SIM_CHECK=1")
    return mode
