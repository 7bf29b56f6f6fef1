"""The instruction table and everything read from it.

``INSTRUCTIONS`` holds one :class:`Inst` per syntax form; ``BY_OPCODE``
indexes them. The DSL namespace, the validator, the parser's checks and the
emulator all read this table; ``UNITS`` says what each emulator operation
is for the profiler and the sanitizer.
"""

from ._counts import COUNTS as COUNTS
from ._docs import describe as describe
from ._names import to_ptx as to_ptx
from ._names import to_python as to_python
from ._fidelity import APPROX as APPROX
from ._fidelity import EXACT as EXACT
from ._fidelity import FLOAT_MMA as FLOAT_MMA
from ._fidelity import READING as READING
from ._fidelity import fidelity_of as fidelity_of
from ._resolve import Resolved as Resolved
from ._resolve import active_operands as active_operands
from ._resolve import arity as arity
from ._resolve import compatible as compatible
from ._resolve import expected_type as expected_type
from ._resolve import resolve as resolve
from ._resolve import vector_count as vector_count
from ._schema import Bound as Bound
from ._schema import Fidelity as Fidelity
from ._schema import Inst as Inst
from ._schema import Operand as Operand
from ._schema import Rule as Rule
from ._schema import Slot as Slot
from ._schema import op as op
from ._schema import slot as slot
from ._special import SPECIAL_REGS as SPECIAL_REGS
from ._special import SpecialReg as SpecialReg
from ._table import BY_OPCODE as BY_OPCODE
from ._table import INSTRUCTIONS as INSTRUCTIONS
from ._table import split_name as split_name
from ._targets import NEWEST_PTX as NEWEST_PTX
from ._targets import SM100_FAMILY as SM100_FAMILY
from ._targets import Requires as Requires
from ._targets import Target as Target
from ._targets import default_version as default_version
from ._targets import parse_target as parse_target
from ._targets import parse_version as parse_version
from ._units import UNITS as UNITS
from ._units import Unit as Unit
from ._wmma import fragment_elements as fragment_elements
from ._wmma import matrix_dims as matrix_dims
