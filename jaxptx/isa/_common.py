"""Operands and target requirements that many families share.

``D``/``A``/``B``/``C`` are the ISA's usual destination and sources typed by
the ``type`` slot; the ``SMxx_PTXyy`` constants are the requirement pairs
that recur across the PTX ISA's "Target ISA Notes".
"""

from __future__ import annotations

from ._schema import op
from ._targets import Requires

D = op("d", "reg", "$type", out=True)
A = op("a", "reg imm", "$type")
B = op("b", "reg imm", "$type")
C = op("c", "reg imm", "$type")

SM53_F16 = Requires(sm=53, ptx=(4, 2))
SM70_PTX60 = Requires(sm=70, ptx=(6, 0))
SM80 = Requires(sm=80, ptx=(7, 0))
SM90_PTX78 = Requires(sm=90, ptx=(7, 8))
SM90_PTX80 = Requires(sm=90, ptx=(8, 0))
SM90_PTX83 = Requires(sm=90, ptx=(8, 3))
SM90_PTX86 = Requires(sm=90, ptx=(8, 6))
