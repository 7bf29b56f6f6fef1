"""The fidelity report of one launch: which instructions ran exactly, which
within the ISA's stated error, which by the emulator's reading of the ISA,
and whether a value of the last two kinds reached an address, a branch or a
barrier.

``Device.launch(..., fidelity=True)`` returns a :class:`Fidelity`. The class
of each instruction comes from the ISA table (:func:`jaxptx.isa.fidelity_of`
reads the entries' ``fidelity`` clauses and ``.approx`` modifiers).

Taint tracking (:class:`Tracker`, hooked into the machine as the profiler's
counter is: ``before(pc, threads)`` ahead of each step, and the memory's
``counter`` hook for every access):

* an approximate or reading instruction taints its destinations, naming
  itself as their origin; every instruction's destinations take the taint
  of its sources (and of its guard predicate), per thread (lane) — a
  destination written with untainted sources becomes clean again;
* instructions that combine lanes (warp collectives, matrix
  multiply-accumulates, ``bar.red``) spread taint over the CTA;
* memory is tracked per byte: shared memory (every CTA's window), local
  memory and each global allocation. A store sets the taint of the bytes it
  writes; a load takes the taint of the bytes it reads; read-modify-writes
  (atomics, mbarrier words, async-proxy copies) merge both ways and never
  clear taint;
* tensor memory is one cell per cluster: ``tcgen05`` instructions that use
  it take its taint and add theirs (never clearing).

A taint is reported when it reaches a ``[...]`` address operand
("address"), the guard or target of a control-flow instruction ("branch":
``@p bra``, ``brx.idx``, a guarded ``ret``/``exit``), or an operand of a
synchronisation instruction (UNITS class ``sync``: ``bar``/``barrier``
ids and counts, mbarrier addresses and counts: "barrier"). Flows through
control dependence (values computed differently because of a tainted
branch) are not followed; the branch itself is reported. Memory starts
clean at each launch: a previous launch's approximate results are not
remembered.

The report classes are in :mod:`.report`, what each instruction does with
taint (its register roles, from the ISA table) in :mod:`.roles`, and the
tracker that follows taint through a launch in :mod:`.tracker`.
"""

from .report import Fidelity as Fidelity
from .report import Reach as Reach
from .report import Usage as Usage
from .roles import CARRY as CARRY
from .tracker import Tracker as Tracker

__all__ = ["Fidelity", "Reach", "Tracker", "Usage"]
