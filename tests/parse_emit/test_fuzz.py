"""Mutation fuzzing of the parser with corpus files as seeds.

Each example takes one of a fixed set of corpus files and applies a few
mutations (delete a span, duplicate a span, insert characters: braces,
quotes, comment openers, NUL, non-ASCII, CR...). The parser must either
return a module that re-emits the mutated text byte for byte, or raise
``ParseError``; any other exception, a mismatch, or a slow parse fails.

The default run is derandomized (same examples every time) and takes a few
seconds; ``-m slow`` runs a longer sweep.
"""

from __future__ import annotations

import csv
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxptx
from jaxptx import ParseError

try:
    from conftest import SHARED
except ImportError:  # another import mode: compute it the same way
    SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared"

CORPUS = SHARED / "corpus"
NO_CORPUS = f"PTX corpus not found at {CORPUS} (expected ../shared/corpus beside the repository)"

MAX_SEED_BYTES = 8192
SEED_COUNT = 12
# Features each wanted in at least one seed: the smallest corpus file (up to
# MAX_SEED_BYTES, ties by path) showing each is picked, then the set is
# topped up with files evenly spaced through the path-sorted candidates.
FEATURES = [
    r"\r\n",                 # CRLF line endings
    r"\.section",            # debug sections
    r"\bcall",               # calls with parenthesised lists
    r"\.func\s*\(",          # return parameters
    r"/\*",                  # block comments
    r"@!%",                  # negated guards
    r"=\s*\{",               # initialisers
    r"\[[^\]\n]*[+-]",       # address offsets
    r"\{\s*\n[^}]*\{",       # nested blocks
    r"\.pragma|\.loc",       # pragma / loc
    r"wgmma|tcgen05|cp\.async\.bulk",  # modern syntax
]


def seed_files() -> list[str]:
    """The fixed, diverse set of seed files (relative paths)."""
    index = CORPUS / "INDEX.tsv"
    if not index.is_file():
        return []
    with index.open(newline="", encoding="utf-8") as f:
        rows = sorted(csv.DictReader(f, delimiter="\t"), key=lambda r: r["path"])
    cands = [r["path"] for r in rows if int(r["bytes"]) <= MAX_SEED_BYTES]
    texts = {p: (CORPUS / p).read_bytes().decode("utf-8") for p in cands}
    by_size = sorted(cands, key=lambda p: (len(texts[p]), p))
    chosen: list[str] = []
    for feature in FEATURES:
        hit = next((p for p in by_size if re.search(feature, texts[p])), None)
        if hit is not None and hit not in chosen:
            chosen.append(hit)
    step = len(cands) / SEED_COUNT
    for k in range(SEED_COUNT):
        if len(chosen) >= SEED_COUNT:
            break
        p = cands[int(k * step)]
        if p not in chosen:
            chosen.append(p)
    return chosen


SEEDS = seed_files()
TEXTS = [(CORPUS / p).read_bytes().decode("utf-8") for p in SEEDS]

SPECIAL = ["{", "}", "(", ")", "[", "]", "<", ">", '"', "'", "/*", "*/", "//", "\\", ";", ",", ":",
           "@", "!", "|", "+", "-", "=", ".", "%", "#", "`", "$", "_", "0x", "0f", "0d", "1", "-1",
           "\x00", "\r", "\n", "\t", " ", "\r\n", "\u00e9", "\u2028", "\ufeff", "\U0001f600", "\x0b",
           "\x0c", "\x85", ".reg", ".b32", "%r1", "{{", "}}", "U", "e", "::"]
insert_text = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters()), min_size=1,
                       max_size=6).map("".join)

mutation = st.one_of(
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 40)),
    st.tuples(st.just("duplicate"), st.floats(0, 1), st.integers(1, 80), st.floats(0, 1)),
    st.tuples(st.just("insert"), st.floats(0, 1), insert_text),
    st.tuples(st.just("replace"), st.floats(0, 1), insert_text),
)


def mutate(text: str, mutations) -> str:
    for m in mutations:
        at = int(m[1] * len(text))
        if m[0] == "delete":
            text = text[:at] + text[at + m[2]:]
        elif m[0] == "duplicate":
            span = text[at:at + m[2]]
            to = int(m[3] * len(text))
            text = text[:to] + span + text[to:]
        elif m[0] == "insert":
            text = text[:at] + m[2] + text[at:]
        else:
            text = text[:at] + m[2] + text[at + len(m[2]):]
    return text


def check(text: str) -> None:
    """Parse either raises ParseError or round-trips exactly (and then the
    canonical text re-parses to an equal module)."""
    try:
        module = jaxptx.parse(text, source="<fuzz>")
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1, e
        return
    assert jaxptx.emit(module) == text
    canonical = jaxptx.emit(module, style="canonical")
    assert jaxptx.parse(canonical) == module


cases = st.tuples(st.integers(0, max(len(SEEDS) - 1, 0)), st.lists(mutation, min_size=1, max_size=3))
COMMON = dict(derandomize=True, database=None, deadline=2000,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


needs_corpus = pytest.mark.skipif(not SEEDS, reason=NO_CORPUS)


@needs_corpus
def test_seed_selection_is_stable_and_diverse() -> None:
    assert len(SEEDS) == SEED_COUNT and len(set(SEEDS)) == SEED_COUNT
    assert any("\r\n" in t for t in TEXTS)
    assert len({p.split("/")[0] for p in SEEDS}) >= 2
    for text in TEXTS:  # the unmutated seeds round-trip
        check(text)


@needs_corpus
@settings(max_examples=4000, **COMMON)
@given(cases)
def test_mutated_corpus_parses_or_raises_parse_error(case) -> None:
    seed, mutations = case
    check(mutate(TEXTS[seed], mutations))


@pytest.mark.slow
@needs_corpus
@settings(max_examples=50000, **COMMON)
@given(cases)
def test_mutated_corpus_parses_or_raises_parse_error_long(case) -> None:
    seed, mutations = case
    check(mutate(TEXTS[seed], mutations))


# Minimal reproducers the fuzzer found. Fixed: the lexer split a dotted
# word such as ``.param.u64`` into ``.param``, ``.u64`` and dropped empty
# words, so a doubled or trailing dot (and, for a bare ``..``, the trivia
# before it) vanished from the output.
@pytest.mark.parametrize("text", [
    "..\n",
    "..version 6.5\n",
    ".version. 6.5\n",
    ".version 6.5 /*c*/ .. /*d*/ 7\n",
    ".global..u32 x;\n",
    ".global .u32. x;\n",
    ".shared::cta. .b8 x;\n",
    ".entry k()\n{\n\t.reg .b8. %r<5>;\n}\n",
    ".address_size 64.ve.\n",   # a dotted word right after a number
])
def test_fuzz_regressions(text) -> None:
    check(text)


# Open: a dotted word whose part ends in ``::`` (``.a::.b`` splits into
# ``.a::`` and ``.b``) round-trips from source, but canonical emission
# spaces the parts (``.a:: .b``) and ``.a::`` alone lexes as ``.a``, ``:``,
# ``:``, so the canonical text parses differently or not at all.
@pytest.mark.parametrize("text", [
    ".a::.b\n",
    ".::.x\n",
    ".entry k()\n{\n\t.reg::.b32 .b64 r;\n}\n",
])
def test_fuzz_canonical_regressions(text) -> None:
    check(text)
