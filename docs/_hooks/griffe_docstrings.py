"""A griffe extension for the reference pages: jaxptx's docstrings are
Google style with a few reST habits; render them as Markdown without
changing the sources.

* ``Example:`` (singular) becomes ``Examples:``, so doctest blocks render as
  Python code (griffe reads the singular as an admonition);
* ``:func:`x``` / ``:class:`` / ``:mod:`` / ... roles become inline code
  (the ``~`` shortening prefix dropped);
* a paragraph ending in ``::`` followed by an indented block becomes a
  fenced code block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc|const|py:\w+):`~?\.?([^`]+)`")
_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


def _literal_blocks(text: str) -> str:
    """reST ``::`` literal blocks as fenced code blocks."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.strip().startswith(">>>"):
            stripped = line.rstrip()[:-1]
            out.append(stripped if stripped.strip() != ":" else "")
            base = len(line) - len(line.lstrip())
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block = []
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base):
                block.append(lines[j])
                j += 1
            while block and not block[-1].strip():
                block.pop()
            if block:
                indent = min(len(b) - len(b.lstrip()) for b in block if b.strip())
                pad = " " * base
                out += ["", pad + "```"] + [pad + b[indent:] for b in block] + [pad + "```", ""]
                i = j
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    """Rewrite each docstring once, as griffe loads its object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is None or getattr(doc, "_jaxptx_done", False):
            return
        text = _EXAMPLE.sub(r"\1Examples:", doc.value)
        text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
        doc.value = _literal_blocks(text)
        doc._jaxptx_done = True
