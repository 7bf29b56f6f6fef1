"""The family modules whose ``ENTRIES`` make up the instruction table."""

from __future__ import annotations

from . import (_ampere, _approx, _arith, _blackwell, _clc, _control, _convert, _hopper, _logic,
               _memory, _multimem, _tma, _video, _warp, _wmma)

FAMILIES = (_arith, _logic, _convert, _approx, _memory, _warp, _control, _ampere, _hopper, _tma,
            _blackwell, _video, _wmma, _multimem, _clc)
