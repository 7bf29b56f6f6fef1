"""mkdocs hooks: the instruction pages (from ``jaxptx.isa``) and the figures
(from ``jaxptx.viz``) are generated when the site is built, so they cannot
fall behind the table or the emulator."""

from __future__ import annotations

import importlib.util
import io
import pathlib
import sys
from typing import Any

from mkdocs.structure.files import File, Files


def _sibling(name: str) -> Any:
    """Load ``docs/_hooks/<name>.py`` under a name no installed module has."""
    path = pathlib.Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_jaxptx_docs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


figures = _sibling("figures")
instructions = _sibling("instructions")
run_pages = _sibling("run_pages")
_REPO = pathlib.Path(__file__).resolve().parents[2]

_PAGES: dict[str, tuple[str, str]] = {}


def on_config(config: Any) -> Any:
    """Replace the nav's single "Instructions" entry by a section of the
    generated family pages."""
    _PAGES.update(instructions.family_pages())
    for top in config["nav"]:
        for items in top.values():
            if not isinstance(items, list):
                continue
            for k, item in enumerate(items):
                if isinstance(item, dict) and item.get("Instructions") == "reference/instructions/index.md":
                    items[k] = {"Instructions": ["reference/instructions/index.md"] + [
                        {title: f"reference/instructions/{slug}.md"} for slug, (title, _) in _PAGES.items()]}
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages and PNG figures to the site's files."""
    from jaxptx.isa._families import FAMILIES
    counts = {m.__name__.rsplit(".", 1)[1].lstrip("_"): len(m.ENTRIES) for m in FAMILIES}
    files.append(File.generated(config, "reference/instructions/index.md",
                                content=instructions.index_markdown(_PAGES, counts)))
    for slug, (_, text) in _PAGES.items():
        files.append(File.generated(config, f"reference/instructions/{slug}.md", content=text))
    for path, make in figures.FIGURES.items():
        fig = make()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        figures.close(fig)
        files.append(File.generated(config, path, content=buf.getvalue()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Run the page's python blocks (guides, home, coming from pyptx) and
    show their output; the reference pages have none."""
    src = page.file.src_uri
    if page.file.generated_by or src.startswith("reference/"):
        return markdown
    return run_pages.with_outputs(markdown, pathlib.Path(config["docs_dir"]) / src, _REPO)
