"""The documentation site builds with warnings as errors (``mkdocs build
--strict``), and every built page has its images and no broken internal
link or anchor. Skipped where the ``docs`` extra is not installed."""

from __future__ import annotations

import html.parser
import pathlib
import re
import subprocess
import sys
import urllib.parse

import pytest

for _name in ("mkdocs", "material", "mkdocstrings_handlers.python", "matplotlib"):
    pytest.importorskip(_name, reason="the docs extra is not installed (pip install -e '.[docs]')")

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
_IMAGE_MD = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


class _Page(html.parser.HTMLParser):
    """The links, images and element ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    return out


def _parse(path: pathlib.Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _target(site: pathlib.Path, page: pathlib.Path, url: str) -> tuple[pathlib.Path, str] | None:
    """The file and anchor an internal link points at (None for external links)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:")):
        return None
    path = page if not parts.path else (page.parent / urllib.parse.unquote(parts.path)).resolve()
    if path.is_dir() or url.endswith("/"):
        path = path / "index.html"
    return path, parts.fragment


def test_every_page_has_its_images_and_no_broken_links(site: pathlib.Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30
    parsed = {p: _parse(p) for p in pages}
    broken = []
    for page, info in parsed.items():
        if page.name == "404.html":          # its links are absolute, for whatever URL 404s
            continue
        for src in info.images:
            hit = _target(site, page, src)
            if hit is not None and not (hit[0].is_file() and hit[0].stat().st_size > 1000):
                broken.append(f"{page.relative_to(site)}: image {src}")
        for href in info.links:
            hit = _target(site, page, href)
            if hit is None:
                continue
            path, anchor = hit
            if not path.is_file():
                broken.append(f"{page.relative_to(site)}: link {href}")
            elif anchor and path.suffix == ".html" and anchor not in parsed.get(path, _Page()).ids:
                broken.append(f"{page.relative_to(site)}: anchor {href}")
    assert not broken, "\n".join(broken[:40])


def test_each_guide_shows_every_image_it_names(site: pathlib.Path) -> None:
    for md in sorted(DOCS.rglob("*.md")):
        if "_hooks" in md.parts:
            continue
        named = _IMAGE_MD.findall(md.read_text())
        rel = md.relative_to(DOCS).with_suffix("")
        built = site / ("" if rel.name == "index" and rel.parent == pathlib.Path(".") else rel) / "index.html"
        if rel.name == "index" and rel.parent != pathlib.Path("."):
            built = site / rel.parent / "index.html"
        shown = _parse(built).images
        for src in named:
            assert any(s.endswith(pathlib.PurePosixPath(src).name) for s in shown), f"{md.name}: {src}"
            assert (site / "images" / pathlib.PurePosixPath(src).name).stat().st_size > 5000


def test_reference_pages_cover_the_public_api_and_the_instruction_table(site: pathlib.Path) -> None:
    from jaxptx.isa import INSTRUCTIONS
    from jaxptx.isa._families import FAMILIES
    dsl = (site / "reference" / "dsl" / "index.html").read_text()
    for name in ("jaxptx.kernel", "jaxptx.Kernel", "jaxptx.Tile", "jaxptx.Layout", "jaxptx.reg",
                 "jaxptx.smem", "jaxptx.ptx"):
        assert f'id="{name}"' in dsl, name
    # A function named like its module is documented by its full path (jaxptx.sim.launch.launch).
    for page, name in (("jax", "jaxptx.jax"), ("sim", "jaxptx.sim.launch.launch"),
                       ("sim", "jaxptx.sim.checking.checking"), ("sim", "jaxptx.sim.Device"),
                       ("text", "jaxptx.parse.parse"), ("text", "jaxptx.emit.emit"),
                       ("text", "jaxptx.check.check"), ("codegen", "jaxptx.codegen"),
                       ("kernels", "jaxptx.kernels.matmul.matmul"), ("kernels", "jaxptx.kernels.softmax"),
                       ("viz", "jaxptx.viz.mma_fragment"), ("viz", "jaxptx.viz.record_pipeline"),
                       ("pyptx", "jaxptx.pyptx"), ("helpers", "jaxptx.dsl.pipeline.Pipeline")):
        assert f'id="{name}"' in (site / "reference" / page / "index.html").read_text(), name
    forms = 0
    for module in FAMILIES:
        slug = module.__name__.rsplit(".", 1)[1].lstrip("_")
        text = (site / "reference" / "instructions" / slug / "index.html").read_text()
        forms += text.count("<li>needs ")
        for inst in module.ENTRIES:
            assert f"PTX ISA {inst.requires.ptx[0]}.{inst.requires.ptx[1]}+" in text
    assert forms == len(INSTRUCTIONS)
