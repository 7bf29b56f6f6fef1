"""PTX text → IR, lossless.

The parser reads the token stream of :mod:`._lexer` by recursive descent and
gives each node the gaps around and between its tokens as ``trivia``: a
node's trailing trivia runs to the end of its line, the rest of the gap
leads the next node. After building a node it checks that the node's tokens
(as the emitter spells them) are exactly the tokens it read, so anything the
IR cannot represent is a ParseError, never a silent change.

The grammar is layered: :mod:`._cursor` (token access, trivia),
:mod:`._operands` (operands, initialisers), and here the module, functions,
declarations and statements.
"""

from __future__ import annotations

import functools
import gc

from .. import ir, isa
from ..emit import function_header_tokens, statement_tokens
from ._lexer import lex
from ._operands import OperandParser

__all__ = ["parse"]

_LINKAGE = frozenset([".extern", ".visible", ".weak", ".common"])
_SPACES = frozenset([".global", ".const", ".shared", ".local", ".param", ".reg", ".tex",
                     ".shared::cta", ".shared::cluster"])
_DECL_START = (_LINKAGE | _SPACES) - {".reg"}
_KINDS = frozenset([".entry", ".func"])


@functools.lru_cache(maxsize=8192)
def _split_opcode(name: str) -> tuple[str, tuple[str, ...]]:
    """``"ld.global.f32"`` → ``("ld", ("global", "f32"))`` by the table's longest
    opcode (the first part for instructions the table lacks)."""
    parts = tuple(name.split("."))
    opcode, mods = isa.split_name(parts) or (parts[0], parts[1:])
    return opcode, tuple(mods)


class _Parser(OperandParser):
    """Module, functions, declarations and statements."""

    # module ----------------------------------------------------------------
    def module(self) -> ir.Module:
        items: list[ir.Item] = []
        while self.i < self.n:
            items.append(self.item())
        self.locate()
        return ir.Module(items, trailing=self.rest.pop(self.n, self.g[self.n]))

    def item(self) -> ir.Item:
        tok = self.peek()
        j = self.i
        while j < self.n and self.t[j] in _LINKAGE:
            j += 1
        if j < self.n and self.t[j] in _KINDS:
            return self.function()
        if tok == ".section":
            return self.section()
        if tok in _DECL_START:
            return self.vardecl(semicolon=True)
        if tok is not None and tok.startswith("."):
            return self.directive()
        if tok is not None and (tok[0].isalpha() or tok[0] == "_"):
            return self.unknown()
        raise self.toks.error(f"expected a directive, declaration or function, got {self._shown()}", self.i)

    def unknown(self) -> ir.Unknown:
        """A top-level statement the grammar does not know (``extern .shared
        ...`` without its dot): its tokens up to ``;``, for ``check`` to report."""
        first = self.i
        depth = 0
        while True:
            tok = self.next("';' ending the statement")
            depth += tok in ("{", "[", "(") and 1 or (-1 if tok in ("}", "]", ")") else 0)
            if depth < 0:
                raise self.toks.error(f"unbalanced {tok!r}", self.i - 1)
            if tok == ";" and depth == 0:
                break
        node = ir.Unknown(tuple(self.t[first:self.i]))
        return self.finish(node, first, statement_tokens(node))

    def section(self) -> ir.Section:
        first = self.expect(".section")
        name = self.next("a section name")
        sec = ir.Section(name)
        sec.trivia = self.trivia(first, self.i - 1)
        sec.body, sec.brace_trivia = self.braced(self.section_entry)
        return sec

    def section_entry(self) -> ir.Statement:
        if self.peek(1) == ":":
            return self.label()
        return self.directive()

    def braced(self, entry) -> tuple[list, tuple[str, ...]]:
        open_ = self.expect("{")
        lead_open, trail_open = self.trivia(open_, open_)
        body = []
        t = self.t
        while t[self.i] != "}":
            if self.i >= self.n:
                raise self.toks.error("expected '}' before end of input", self.i)
            body.append(entry())
        close = self.expect("}")
        lead_close, trail_close = self.trivia(close, close)
        return body, (lead_open, trail_open, lead_close, trail_close)

    # functions ---------------------------------------------------------------
    def function(self) -> ir.Function:
        first = self.i
        linkage = []
        while self.peek() in _LINKAGE:
            linkage.append(self.next()[1:])
        kind = self.next()[1:]
        returns = None
        if self.peek() == "(":
            returns = self.param_list()
        name = self.name("a function name")
        params_parens = self.peek() == "("
        params = self.param_list() if params_parens else []
        f = ir.Function(kind, name, params, returns, tuple(linkage), params_parens=params_parens)
        self.located.append((f, first))
        self.registers = ir.Registers()
        for p in [*params, *(returns or [])]:
            if p.space == "reg":
                self.registers.declare(p.name, True)
        if function_header_tokens(f) != self.t[first:self.i]:
            raise self.toks.error("jaxptx cannot represent this function header exactly", first)
        f.trivia = self.trivia(first, self.i - 1)
        while self.peek() not in ("{", ";"):
            if self.peek() is None or not self.peek().startswith("."):
                raise self.toks.error(f"expected '{{', ';' or a directive after the header of "
                                      f"{name}, got {self._shown()}", self.i)
            # `.extern .func f(...) .noreturn;`: the ';' ends the declaration, not the directive
            f.directives.append(self.directive(ends_at_semicolon=True))
        if self.peek() == ";":
            end = self.expect(";")
            f.body, f.brace_trivia = None, self.trivia(end, end)
        else:
            f.body, f.brace_trivia = self.braced(self.statement)
        return f

    def param_list(self) -> list[ir.VarDecl]:
        self.expect("(")
        params = []
        while self.peek() != ")":
            if params:
                self.expect(",")
            params.append(self.vardecl(semicolon=False, trivia=False))
        self.expect(")")
        return params

    # statements --------------------------------------------------------------
    def statement(self) -> ir.Statement:
        tok = self.t[self.i]
        if tok[:1] not in ".{@" and self.t[self.i + 1] != ":" and tok:
            return self.instruction()       # the common case first
        if tok == "{":
            block = ir.Block()
            block.body, block.trivia = self.braced(self.statement)
            return block
        if tok == ".reg":
            return self.regdecl()
        if tok in _DECL_START:
            return self.vardecl(semicolon=True)
        if tok is not None and tok.startswith(".") and tok not in _KINDS:
            return self.directive()
        if self.peek(1) == ":" and tok not in ("@", None):
            return self.label()
        return self.instruction()

    def label(self) -> ir.Label:
        first = self.i
        name = self.name("a label")
        self.expect(":")
        return self.finish(ir.Label(name), first, [name, ":"])

    def directive(self, ends_at_semicolon: bool = False) -> ir.Directive:
        first = self.i
        name = self.next()
        args: list[str] = []
        semicolon = False
        while self.i < self.n:
            tok = self.t[self.i]
            if tok == ";":
                if ends_at_semicolon:        # the ';' belongs to what the directive is part of
                    break
                self.i += 1
                semicolon = True
                break
            # Arguments end at a brace, or at a line break not after a comma;
            # a target list (.branchtargets, .calltargets) runs to its ';'
            # and may start on the next line (LLVM writes it so).
            if tok in ("{", "}") or ("\n" in self.g[self.i] and not (args and args[-1] == ",")
                                     and name not in (".branchtargets", ".calltargets")):
                break
            args.append(tok)
            self.i += 1
        if not name.startswith("."):
            raise self.toks.error(f"expected a directive, got {name!r}", first)
        d = ir.Directive(name[1:], tuple(args), semicolon)
        d.trivia = self.trivia(first, self.i - 1)   # its tokens are the ones read
        self.located.append((d, first))
        return d

    def regdecl(self) -> ir.RegDecl:
        first = self.expect(".reg")
        vector = None
        if self.peek() in (".v2", ".v4", ".v8"):
            vector = int(self.next()[2:])
        type_ = self.next("a register type")
        if not type_.startswith("."):
            raise self.toks.error(f"expected a register type like .b32, got {type_!r}", self.i - 1)
        names = []
        while True:
            name = self.name("a register name")
            count = None
            if self.peek() == "<":
                self.next()
                count = self.int_token("a register count")
                self.expect(">")
            names.append(ir.RegName(name, count))
            if self.peek() != ",":
                break
            self.next()
        self.expect(";")
        d = ir.RegDecl(type_[1:], tuple(names), vector)
        for n in names:
            self.registers.declare(n.name, True)
            if n.count is not None:
                self.registers.declare(n.name, True, n.count)
        return self.finish(d, first, statement_tokens(d))

    def vardecl(self, *, semicolon: bool, trivia: bool = True) -> ir.VarDecl:
        first = self.i
        linkage, attrs, layout = [], [], []
        space = type_ = None
        align = vector = None
        while self.peek() is not None and self.peek().startswith("."):
            tok = self.next()
            if tok in _LINKAGE and space is None:
                linkage.append(tok[1:])
                key = "linkage"
            elif tok in _SPACES and space is None:
                space, key = tok[1:], "space"
            elif tok == ".ptr" or (attrs and tok in _SPACES) or (attrs and tok == ".align"):
                attrs.append(tok)
                if tok == ".align":
                    attrs.append(self.next("an alignment"))
                key = "attr"
            elif tok == ".align":
                align, key = self.int_token("an alignment"), "align"
            elif tok[:2] == ".v" and tok[2:].isdigit():
                vector, key = int(tok[2:]), "vector"
            elif type_ is None:
                type_, key = tok[1:], "type"
            else:
                raise self.toks.error(f"unexpected {tok!r} in a declaration", self.i - 1)
            if not layout or layout[-1] != key:
                layout.append(key)
        if space is None or type_ is None:
            raise self.toks.error("expected a state space and a type before the name", self.i)
        name = self.name("a variable name")
        dims = []
        while self.peek() == "[":
            self.next()
            dims.append(-1 if self.peek() == "]" else self.int_token("an array size"))
            self.expect("]")
        init, braced = None, False
        if self.peek() == "=":
            self.next()
            braced = self.peek() == "{"
            init = self.initialiser().items if braced else (self.initialiser(),)
        if semicolon:
            self.expect(";")
        canonical = [k for k in ("linkage", "space", "attr", "align", "vector", "type") if k in layout]
        d = ir.VarDecl(space, type_, name, tuple(linkage), align, vector, tuple(dims), init, braced,
                       tuple(attrs), layout=None if layout == canonical else tuple(layout))
        if not trivia:
            self.located.append((d, first))
            return d
        return self.finish(d, first, statement_tokens(d))

    def instruction(self) -> ir.Instruction:
        first = self.i
        t = self.t
        guard = None
        if t[self.i] == "@":
            self.i += 1
            negated = t[self.i] == "!"
            if negated:
                self.i += 1
            guard = ir.Guard(ir.Register(self.name("a predicate register")), negated)
        at = self.i
        name = t[at]
        if not (name[:1].isalpha() or name[:1] == "_"):
            raise self.toks.error(f"expected an instruction, got {self._shown()}", at)
        self.i += 1
        opcode, mods = _split_opcode(name)
        operands = []
        if t[self.i] != ";":
            while True:
                # The common operand, a register followed by `,` or `;`, inline.
                tok, after = t[self.i], t[self.i + 1]
                if tok[:1] == "%" and (after == "," or after == ";"):
                    operands.append(ir.Register(tok))
                    self.i += 1
                elif tok == "[" and after[:1] == "%" and t[self.i + 2] == "]":
                    operands.append(ir.Address(ir.Register(after)))
                    self.i += 3
                else:
                    operands.append(self.operand())
                if t[self.i] != ",":
                    break
                self.i += 1
        self.expect(";")
        ins = ir.Instruction(opcode, mods, tuple(operands), guard)
        self.located.append((ins, at))
        # Built token by token from what was read, so it re-emits exactly
        # (the corpus round trip and the fuzz test hold it to that).
        ins.trivia = self.trivia(first, self.i - 1)
        return ins

def parse(text: str, source: str = "<string>") -> ir.Module:
    """Parse PTX text into an IR module that re-emits it byte for byte.

    Args:
        text: PTX source.
        source: a name for messages (a file path).

    Returns:
        The module; ``jaxptx.emit(parse(text)) == text``.

    Raises:
        ParseError: malformed input, with line, column and a caret excerpt.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse: expected PTX text (str), got {type(text).__name__}")
    # Every object the parse allocates survives it; the cyclic collector's
    # passes over them cost a quarter of the time and free nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        parser = _Parser(lex(text, source))
        return parser.module()
    except RecursionError:
        raise parser.toks.error("nesting too deep", min(parser.i, parser.n - 1)) from None
    finally:
        if enabled:
            gc.enable()
