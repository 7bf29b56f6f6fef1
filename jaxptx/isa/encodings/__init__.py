"""The bit-level encodings jaxptx writes and the emulator reads, each in one
module with its encoder beside its decoder:

* :class:`MatrixDescriptor`: the 64-bit wgmma shared-memory matrix descriptor;
* :class:`SmemDescriptor`: the 64-bit sm_100 (``tcgen05``) shared-memory descriptor;
* :class:`InstrDesc`: the 32-bit ``tcgen05.mma`` instruction descriptor;
* :class:`TensorMap`: jaxptx's 128-byte tensor map;
* :data:`SWIZZLES`: the swizzle modes and their code in each of them.

Each is a frozen dataclass with ``encode()`` and a ``decode()`` classmethod
that raise :class:`EncodingError` naming the field, what it may hold and
what it got. Ground layer: imports :mod:`jaxptx.types` and :mod:`jaxptx.errors` only.

Example:
    >>> d = SmemDescriptor.decode(0x4000404000010000)
    >>> (d.lbo, d.sbo, d.swizzle)
    (16, 1024, '128B')
    >>> hex(d.encode())
    '0x4000404000010000'
"""

from ._fields import BitField as BitField
from ._fields import EncodingError as EncodingError
from ._instr_desc import AB_TYPES as AB_TYPES
from ._instr_desc import BLOCK_SCALED as BLOCK_SCALED
from ._instr_desc import D_TYPES as D_TYPES
from ._instr_desc import DENSE_K as DENSE_K
from ._instr_desc import KINDS as KINDS
from ._instr_desc import InstrDesc as InstrDesc
from ._instr_desc import idesc_fields as idesc_fields
from ._matrix_desc import TCGEN05_FIELDS as TCGEN05_FIELDS
from ._matrix_desc import WGMMA_FIELDS as WGMMA_FIELDS
from ._matrix_desc import MatrixDescriptor as MatrixDescriptor
from ._matrix_desc import SmemDescriptor as SmemDescriptor
from ._matrix_desc import wgmma_fields as wgmma_fields
from ._swizzle import ENCODINGS as ENCODINGS
from ._swizzle import SWIZZLES as SWIZZLES
from ._swizzle import Swizzle as Swizzle
from ._swizzle import swizzle as swizzle
from ._swizzle import swizzle_from_code as swizzle_from_code
from ._tensor_map import ATOMICITY_NAMES as ATOMICITY_NAMES
from ._tensor_map import CORNER_BITS as CORNER_BITS
from ._tensor_map import ELEMTYPES as ELEMTYPES
from ._tensor_map import IM2COL as IM2COL
from ._tensor_map import INTERLEAVE_BYTES as INTERLEAVE_BYTES
from ._tensor_map import TENSOR_MAP_FIELDS as TENSOR_MAP_FIELDS
from ._tensor_map import TENSOR_MAP_MAGIC as TENSOR_MAP_MAGIC
from ._tensor_map import TENSOR_MAP_SIZE as TENSOR_MAP_SIZE
from ._tensor_map import TENSOR_MAP_VERSION as TENSOR_MAP_VERSION
from ._tensor_map import TensorMap as TensorMap
