"""The documentation runs: every fenced ``python`` block of every guide is
executed, in order, one namespace per page (on the CPU emulator here), so
the docs cannot drift from the code. Each block is compiled with the page's
path and its own line numbers, so a failure (and any jaxptx error that
cites a kernel line) points at the Markdown line.

A block fenced as ```` ```python no-run ```` is shown but not run (none of
the guides needs one today)."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


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
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    monkeypatch.chdir(page.parent)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for first, source in python_blocks(text):
        code = compile("\n" * (first - 1) + source, str(page), "exec")
        try:
            exec(code, namespace)
        except Exception as e:       # name the page and line in the failure
            raise AssertionError(f"{page.relative_to(DOCS)}: the block at line {first} raised "
                                 f"{type(e).__name__}: {e}") from e
        finally:
            if plt is not None:
                plt.close("all")
