"""The documentation runs: every fenced ``python`` block of every guide is
executed, in order, one namespace per page (on the CPU emulator here), so
the docs cannot drift from the code. Each block is compiled with the page's
path and its own line numbers, so a failure (and any jaxptx error that
cites a kernel line) points at the Markdown line.

A block fenced as ```` ```python no-run ```` is shown but not run (none of
the guides needs one today).

A page that sets ``--xla_force_host_platform_device_count`` (the collectives
guide: 8 CPU devices) runs in a fresh Python of its own, since jax fixes the
device count when it starts and other pages have started it here already;
``python tests/docs/test_docs_code.py PAGE`` runs one page that way."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
FRESH_PROCESS = "xla_force_host_platform_device_count"
"""A page whose text holds this sets jax's device count: it runs in a Python of its own."""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, source)`` of each runnable ```` ```python ```` block."""
    blocks = []
    for m in _FENCE.finditer(text):
        if "no-run" in m.group(1):
            continue
        first = text.count("\n", 0, m.start(2)) + 1
        blocks.append((first, m.group(2)))
    return blocks


def test_the_guides_have_code() -> None:
    """Every guide page has python to run (the test below is not vacuous)."""
    guides = [p for p in PAGES if p.parent.name == "guides"]
    assert len(guides) >= 10
    for page in guides:
        assert python_blocks(page.read_text()), f"{page.name} has no python block"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_code_runs(page: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = page.read_text()
    if "viz" in text:
        pytest.importorskip("matplotlib")
    if "\nimport torch\n" in text:
        pytest.importorskip("torch", reason="the torch guide needs torch (pip install -e '.[torch]')")
    if "import triton" in text:
        pytest.importorskip("triton.language", reason="the Triton examples need Triton (pip install -e '.[triton]')")
    if FRESH_PROCESS in text:
        run = subprocess.run([sys.executable, __file__, str(page)], capture_output=True, text=True, timeout=600,
                             check=False)
        assert run.returncode == 0, f"{page.relative_to(DOCS)} in a fresh process:\n{run.stderr[-4000:]}"
        return
    run_page(page, monkeypatch.chdir)


def run_page(page: pathlib.Path, chdir: object = None) -> None:
    """Run every block of ``page`` in order, in one namespace (in its folder:
    ``chdir``, default ``os.chdir``).

    Raises:
        AssertionError: a block raised, naming the page and the block's line.
    """
    import os
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    (chdir or os.chdir)(page.parent)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for first, source in python_blocks(page.read_text()):
        code = compile("\n" * (first - 1) + source, str(page), "exec")
        try:
            exec(code, namespace)
        except Exception as e:       # name the page and line in the failure
            raise AssertionError(f"{page.relative_to(DOCS)}: the block at line {first} raised "
                                 f"{type(e).__name__}: {e}") from e
        finally:
            if plt is not None:
                plt.close("all")


if __name__ == "__main__":           # one page in a Python of its own (see the module docstring)
    run_page(pathlib.Path(sys.argv[1]).resolve())
