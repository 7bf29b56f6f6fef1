"""Run each guide's python blocks when the site is built, in order, one
namespace per page, and show what each block prints under it. A block that
raises fails the build, naming the page and line: the docs cannot show
output the code no longer produces.

A page that sets ``--xla_force_host_platform_device_count`` (the collectives
guide) runs in a Python of its own (``python run_pages.py PAGE ROOT`` prints
the page with its outputs): jax fixes the device count when it starts, and
the pages before it have started it in the build's process."""

from __future__ import annotations

import contextlib
import html
import io
import pathlib
import re
import subprocess
import sys

_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MAX_LINES = 40
FRESH_PROCESS = "xla_force_host_platform_device_count"


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
    if FRESH_PROCESS in markdown and __name__ != "__main__":
        run = subprocess.run([sys.executable, __file__, str(path), str(root)], capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"{path.relative_to(root)} in a fresh process:\n{run.stderr[-4000:]}")
        return run.stdout
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


if __name__ == "__main__":          # one page in a Python of its own (see the module docstring)
    page, top = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    sys.stdout.write(with_outputs(page.read_text(), page, top))
