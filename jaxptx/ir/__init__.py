"""The PTX module as plain data (lossless: see ``jaxptx.emit``)."""

from ._nodes import Block as Block
from ._nodes import Comment as Comment
from ._nodes import Directive as Directive
from ._nodes import Function as Function
from ._nodes import Guard as Guard
from ._nodes import Instruction as Instruction
from ._nodes import Item as Item
from ._nodes import Label as Label
from ._nodes import Module as Module
from ._nodes import RegDecl as RegDecl
from ._nodes import RegName as RegName
from ._nodes import Section as Section
from ._nodes import Statement as Statement
from ._nodes import Trivia as Trivia
from ._nodes import Unknown as Unknown
from ._nodes import VarDecl as VarDecl
from ._operands import Address as Address
from ._operands import Immediate as Immediate
from ._operands import Negated as Negated
from ._operands import Operand as Operand
from ._operands import Pair as Pair
from ._operands import Parens as Parens
from ._operands import Register as Register
from ._operands import Sink as Sink
from ._operands import Symbol as Symbol
from ._operands import Vector as Vector
