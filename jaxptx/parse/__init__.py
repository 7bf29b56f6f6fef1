"""PTX text → IR (lossless: ``emit(parse(s)) == s``)."""

from ..errors import ParseError as ParseError
from ._parser import parse as parse
