"""PTX text → IR (lossless: ``emit(parse(s)) == s``).

Besides :func:`parse`, the lexer (:func:`lex`, :class:`Tokens`) and the
reading of one numeric literal (:func:`immediate`) are public: the DSL's
exact-PTX constructors (``ptx.directive``, ``ptx.imm``) use them.
"""

from ..errors import ParseError as ParseError
from ._lexer import Tokens as Tokens
from ._lexer import lex as lex
from ._literals import immediate as immediate
from ._parser import parse as parse
