"""The error classes of jaxptx.

Each subclasses the builtin a caller would expect (``PtxTypeError`` is a
``TypeError``), so ``except TypeError`` still catches it. Messages say what was
expected, what came, and where (the user's Python line for traced kernels).
"""

from __future__ import annotations

__all__ = [
    "PtxError", "PtxTypeError", "PtxModifierError", "PtxOperandError",
    "PtxTargetError", "PtxVersionError", "SpecError", "ToolchainError",
    "PtxasError", "TraceError", "ParseError", "LaunchError",
]


class PtxError(Exception):
    """Base class of every jaxptx error."""


class PtxTypeError(PtxError, TypeError):
    """An operand's PTX type does not fit the instruction."""


class PtxModifierError(PtxError, ValueError):
    """An instruction modifier is unknown, repeated, missing or out of place."""


class PtxOperandError(PtxError, ValueError):
    """Wrong number or kind of operands (register, immediate, address, vector)."""


class PtxTargetError(PtxError, ValueError):
    """The instruction or feature needs a newer or different ``sm_XX`` target."""


class PtxVersionError(PtxError, ValueError):
    """The instruction or feature needs a newer PTX ISA version."""


class SpecError(PtxError, TypeError, ValueError):
    """A tensor spec (``Tile``), shape, dtype or symbolic dim is inconsistent,
    or an argument of a library op (:mod:`jaxptx.kernels`, :mod:`jaxptx.torch`)
    has the wrong shape, dtype or value.

    It is both a ``TypeError`` and a ``ValueError``: one class for every bad
    argument, which ``except TypeError`` (the builtin for a wrong dtype) and
    ``except ValueError`` (a wrong shape or value) both catch.
    """


class TraceError(PtxError, RuntimeError):
    """The kernel body misused the tracing API (no active trace, bad nesting)."""


class LaunchError(PtxError, ValueError):
    """A launch (grid, block, cluster, shared memory) outside CUDA's limits
    for the target (see :mod:`jaxptx.launch`)."""


class ToolchainError(PtxError, RuntimeError):
    """A CUDA tool (ptxas, nvdisasm, nvJitLink) is missing or failed to run."""


class PtxasError(ToolchainError):
    """ptxas rejected a module; ``log`` holds its full output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class ParseError(PtxError, ValueError):
    """Malformed PTX text.

    Attributes:
        line, column: 1-based position of the offending token.
        source: the name of the file (or ``"<string>"``).
        excerpt: the offending line with a caret under the column.
    """

    def __init__(self, message: str, *, source: str = "<string>", line: int = 0,
                 column: int = 0, excerpt: str = "") -> None:
        super().__init__(f"{source}:{line}:{column}: {message}" + (f"\n{excerpt}" if excerpt else ""))
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.excerpt = excerpt
