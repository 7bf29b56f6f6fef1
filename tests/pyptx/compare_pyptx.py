"""Compare the PTX pyptx itself emits for its examples with ours.

``python tests/pyptx/compare_pyptx.py`` prints, per example kernel: the
instruction count of each, whether ptxas accepts pyptx's own PTX, and the
instruction forms (opcode and modifiers) whose counts differ. Used by
``test_pyptx_examples.py`` and to write the table in
``docs/coming_from_pyptx.md``.
"""

from __future__ import annotations

import collections
import importlib
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import _pyptx_loader as _examples  # noqa: E402

_SKIP = re.compile(r"^\s*($|//|\.|\{|\}|[\w$]+:)")


def forms(ptx_text: str) -> collections.Counter[str]:
    """Instruction forms (``add.s64``, guard dropped) counted over a PTX text."""
    out: collections.Counter[str] = collections.Counter()
    for line in ptx_text.splitlines():
        if _SKIP.match(line):
            continue
        tok = line.split()[0] if not line.lstrip().startswith("@") else line.split()[1]
        out[tok.rstrip(";")] += 1
    return out


def build_both(module: str, builder: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """The kernel built by pyptx's own example and by the rewritten one."""
    _examples.install()
    with _examples._torch_stub():
        theirs = importlib.import_module(f"pyptx.examples.{module}")
    ours = _examples.load(module)
    return getattr(theirs, builder)(*args, **kwargs), getattr(ours, builder)(*args, **kwargs)


def compare(module: str, builder: str, args: tuple = (), kwargs: dict | None = None) -> dict[str, Any]:
    """Counts, pyptx's ptxas verdict and the differing forms for one kernel."""
    from jaxptx.runtime import resources
    theirs, ours = build_both(module, builder, args, kwargs or {})
    their_text, our_text = theirs.ptx(), ours.ptx()
    arch = re.search(r"\.target\s+(\w+)", their_text).group(1)
    try:
        resources(their_text, arch)
        theirs_ok = True
    except Exception as e:  # ptxas refused pyptx's PTX
        theirs_ok = str(e).splitlines()[0][:120]
    a, b = forms(their_text), forms(our_text)
    diff = {k: (a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)}
    return {"pyptx": sum(a.values()), "ours": sum(b.values()), "pyptx_ptxas": theirs_ok, "diff": diff}


if __name__ == "__main__":
    from test_pyptx_examples import RUNS, TRACE_ONLY, XFAIL
    cases = [(k.split("/")[0], v[0], v[1], {}) for k, v in {**RUNS, **XFAIL}.items()]
    cases += [(m, b, (), kw) for m, b, kw in TRACE_ONLY]
    for module, builder, args, kw in cases:
        try:
            r = compare(module, builder, args, kw)
        except Exception as e:
            print(f"{module}.{builder}: {type(e).__name__}: {str(e)[:200]}")
            continue
        top = sorted(r["diff"].items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:6]
        print(f"{module}.{builder}{args or ''}: pyptx {r['pyptx']} / ours {r['ours']} instructions; "
              f"pyptx ptxas: {r['pyptx_ptxas']}; " + ", ".join(f"{k} {x}->{y}" for k, (x, y) in top))
