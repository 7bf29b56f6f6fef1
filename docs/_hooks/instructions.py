"""Instruction reference pages, one per family of the table, generated from
``jaxptx.isa`` (every form's syntax, operands, minimum target, PTX ISA
version and ISA section)."""

from __future__ import annotations

import html

from jaxptx.isa import Inst, Operand, to_python
from jaxptx.isa._families import FAMILIES

_ISA_URL = "https://docs.nvidia.com/cuda/parallel-thread-execution/"
_TITLES = {"arith": "Arithmetic", "logic": "Logic, bits, compare and select",
           "convert": "Data movement and conversion", "approx": "Transcendentals",
           "memory": "Loads, stores and atomics", "warp": "Warp shuffle, vote and reduce",
           "control": "Control flow, barriers and fences", "ampere": "Ampere: cp.async, ldmatrix, mma.sync",
           "hopper": "Hopper: wgmma, mbarrier, clusters", "tma": "Hopper: bulk and tensor copies (TMA)",
           "blackwell": "Blackwell: tcgen05", "video": "Video instructions", "wmma": "wmma",
           "multimem": "multimem: multicast memory across GPUs"}


def family_pages() -> dict[str, tuple[str, str]]:
    """``{slug: (title, markdown)}`` for every family module of the table."""
    pages = {}
    for module in FAMILIES:
        slug = module.__name__.rsplit(".", 1)[1].lstrip("_")
        doc = " ".join((module.__doc__ or slug).split()).replace("``", "`")
        about = doc.removeprefix("Instruction table entries:").strip()
        title = _TITLES.get(slug, slug)
        pages[slug] = (title, _family_markdown(title, about[:1].upper() + about[1:], module.ENTRIES))
    return pages


def index_markdown(pages: dict[str, tuple[str, str]], counts: dict[str, int]) -> str:
    """The instructions landing page: the naming rule and the families."""
    rows = "\n".join(f"| [{title}]({slug}.md) | {counts[slug]} |" for slug, (title, _) in pages.items())
    return f"""# Instructions

Every PTX instruction jaxptx knows is one entry per syntax form in
`jaxptx.isa.INSTRUCTIONS` ({sum(counts.values())} forms). These pages are
generated from that table when the site is built: each form's PTX syntax,
its operands (kind, type, direction), the minimum target and PTX ISA version,
and the section of the [PTX ISA]({_ISA_URL}) it comes from.

In a kernel, `ptx.<opcode>.<modifier>...(operands)` reaches every form by
one naming rule: `::` becomes `__`, a part starting with a digit gets a
leading `_` (`.2d` is `._2d`), and Python keywords get a trailing `_`
(`.global` is `.global_`). Leaving out a destination allocates it:
`v = ptx.ld.global_.f32(addr)`. `jaxptx.isa.describe("wgmma.mma_async")`
prints a page's content for one opcode.

| family | forms |
|---|---|
{rows}
"""


def _operand(op: Operand) -> str:
    kinds = "|".join(op.kinds)
    parts = [f"`{op.name}`", "destination" if op.out else "source", kinds]
    if op.type:
        parts.append(f"of the `{op.type[1:]}` modifier's type" if op.type.startswith("$") else f".{op.type}")
    if op.count is not None:
        parts.append(f"x{op.count}" if isinstance(op.count, int) else f"(count: {op.count})")
    if op.optional:
        parts.append("optional")
    if op.when:
        parts.append(f"when {op.when}")
    return " ".join(parts)


def _target(inst: Inst) -> str:
    req = inst.requires
    target = req.describe() if (req.only or req.sm) else "any target"
    return f"{target}, PTX ISA {req.ptx[0]}.{req.ptx[1]}+"


def _family_markdown(title: str, about: str, entries: tuple[Inst, ...] | list[Inst]) -> str:
    by_opcode: dict[str, list[Inst]] = {}
    for inst in entries:
        by_opcode.setdefault(inst.opcode, []).append(inst)
    out = [f"# {title}", "", about, "",
           f"{len(entries)} forms, generated from `jaxptx.isa` (see [Instructions](index.md) for the naming rule).", ""]
    for opcode, forms in by_opcode.items():
        dsl = "ptx." + ".".join(to_python(p) for p in opcode.split("."))
        summary = (forms[0].summary or "").rstrip(".")
        out += [f"## {opcode}", "", (f"{summary[:1].upper() + summary[1:]}. " if summary else "")
                + f"In a kernel: `{dsl}`.", ""]
        for inst in forms:
            # Raw HTML so that long modifier lists wrap (class ptx-form in extra.css).
            form = html.escape(inst.form).replace(",", ",<wbr>").replace("&gt;&lt;", "&gt;<wbr>&lt;")
            out += [f'<pre class="ptx-form"><code>{form}</code></pre>', ""]
            if inst.summary and inst.summary != forms[0].summary:
                out += [f"{inst.summary}.", ""]
            out.append(f"* needs {_target(inst)}" + (f"; PTX ISA section {inst.section}" if inst.section else ""))
            if inst.operands:
                out.append("* operands: " + "; ".join(_operand(op) for op in inst.operands))
            out.append("")
    return "\n".join(out) + "\n"
