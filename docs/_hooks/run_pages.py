"""Run each guide's python blocks when the site is built, in order, one
namespace per page, and show what each block prints under it. A block that
raises fails the build, naming the page and line: the docs cannot show
output the code no longer produces."""

from __future__ import annotations

import contextlib
import html
import io
import pathlib
import re

_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MAX_LINES = 40


def _shorten(text: str, root: str) -> str:
    text = text.replace(root, "").rstrip()
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES - 5] + [f"... ({len(lines) - MAX_LINES + 5} more lines)"]
    return "\n".join(lines)


def with_outputs(markdown: str, path: pathlib.Path, root: pathlib.Path) -> str:
    """``markdown`` with each python block's printed output after it.

    Raises:
        RuntimeError: a block raised; names the page, the line and the error.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rel = str(path.relative_to(root))
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    out, last = [], 0
    for m in _FENCE.finditer(markdown):
        out.append(markdown[last:m.end()])
        last = m.end()
        if "no-run" in m.group(1):
            continue
        first = markdown.count("\n", 0, m.start(2)) + 1
        # the page's own path: @triton.jit reads a kernel's source back from its file
        code = compile("\n" * (first - 1) + m.group(2), str(path), "exec")
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(code, namespace)
        except Exception as e:
            raise RuntimeError(f"{rel}: the python block at line {first} raised "
                               f"{type(e).__name__}: {e}") from e
        finally:
            plt.close("all")
        printed = _shorten(buf.getvalue(), str(root) + "/")
        if printed:       # raw HTML: wraps long lines (class output in extra.css)
            out.append(f'\n\n<pre class="output"><code>{html.escape(printed)}</code></pre>\n')
    out.append(markdown[last:])
    return "".join(out)
