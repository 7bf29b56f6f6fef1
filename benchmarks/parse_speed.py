"""Parse and emit throughput over the PTX corpus, jaxptx against pyptx.

Reads every ``.ptx`` file under the corpus (default ``../shared/corpus``
beside the repository), then times, for jaxptx, ``parse`` over all files and
``emit`` (source style, and canonical style) over the parsed modules, and
counts the files whose source emission is byte-identical to the input. When
``pyptx`` is installed (``pip install 'jaxptx[bench]'``) its public parser
(``pyptx.parser.parse``) and emitter (``pyptx.emitter.emit``) run over the
same files in the same process: throughput, how many files it parses
without an error, and how many of its emissions are byte-identical. pyptx
keeps the source text on the module (``Module.raw_source``) and its emitter
returns it while the module is unmodified, so the benchmark also emits each
pyptx module with ``raw_source``/``raw_header`` cleared (a public dataclass
field; ``dataclasses.replace``) to count what its IR alone reproduces.

Every time is the best of ``--repeat`` passes over the whole corpus.

    python benchmarks/parse_speed.py [--corpus PATH] [--repeat N] [--every K]
    python benchmarks/parse_speed.py --smoke    # CI: every 10th corpus file, one pass

Checked (``self-check:`` line, exit status 1 otherwise): jaxptx parses
every file, emits every parsed module back byte for byte, and emits every
one in canonical style. Without the corpus, ``--smoke`` runs on the PTX of
the repository's example kernels instead (traced here) and says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"


def load(corpus: pathlib.Path) -> list[tuple[str, str]]:
    """(relative path, exact text) of every ``.ptx`` file, sorted by path."""
    files = sorted(corpus.rglob("*.ptx"))
    return [(p.relative_to(corpus).as_posix(), p.read_bytes().decode("utf-8")) for p in files]


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def example_texts() -> list[tuple[str, str]]:
    """(name, PTX) of a few example kernels of the repository, traced here:
    the stand-in corpus of ``--smoke`` when the shared corpus is absent."""
    sys.path.insert(0, str(REPO / "examples"))
    from mma_gemm import mma_gemm
    from softmax import softmax
    return [("examples/softmax.py", softmax.ptx(B=4, N=1024)),
            ("examples/mma_gemm.py", mma_gemm.ptx(M=32, N=32, K=32))]


def nbytes(texts: Any) -> int:
    """Total UTF-8 bytes of ``texts``."""
    return sum(len(t.encode("utf-8")) for t in texts)


def parse_all(parse: Callable[[str], Any], texts: list[str]) -> list[Any]:
    """Each file's module, or the exception it raised."""
    out: list[Any] = []
    for text in texts:
        try:
            out.append(parse(text))
        except Exception as e:  # noqa: BLE001 - counted, reported as a failure
            out.append(e)
    return out


def emit_all(emit: Callable[[Any], str], modules: list[Any]) -> list[str | Exception]:
    """Each module's text, or the exception its emission raised."""
    out: list[str | Exception] = []
    for m in modules:
        try:
            out.append(emit(m))
        except Exception as e:  # noqa: BLE001
            out.append(e)
    return out


@dataclasses.dataclass
class Row:
    """One tool's figures: parse time and size, files parsed, emit time, byte-exact files."""

    tool: str
    parse_s: float
    parse_mb: float
    parsed: int
    emit_s: float | None = None
    emit_mb: float = 0.0
    exact: int = 0
    note: str = ""

    @property
    def parse_rate(self) -> float:
        """Parse throughput, MB/s."""
        return self.parse_mb / self.parse_s

    @property
    def emit_rate(self) -> float | None:
        """Emit throughput, MB/s (None when not timed)."""
        return None if not self.emit_s else self.emit_mb / self.emit_s


def bench_jaxptx(files: list[tuple[str, str]], repeat: int) -> tuple[list[Row], list[str]]:
    """jaxptx's parse, source emit and canonical emit rows, and the files it failed to parse."""
    import jaxptx

    texts = [t for _, t in files]
    mb = nbytes(texts) / 1e6
    t_parse, results = best_of(lambda: parse_all(jaxptx.parse, texts), repeat)
    ok = [(m, t) for m, t in zip(results, texts) if not isinstance(m, Exception)]
    failed = [p for (p, _), m in zip(files, results) if isinstance(m, Exception)]
    modules = [m for m, _ in ok]
    ok_mb = nbytes(t for _, t in ok) / 1e6
    t_emit, emitted = best_of(lambda: emit_all(jaxptx.emit, modules), repeat)
    exact = sum(e == t for e, (_, t) in zip(emitted, ok))
    t_canon, canon = best_of(lambda: emit_all(lambda m: jaxptx.emit(m, style="canonical"), modules),
                             repeat)
    canon_ok = sum(not isinstance(c, Exception) for c in canon)
    rows = [
        Row("jaxptx", t_parse, mb, len(ok), t_emit, ok_mb, exact, "emit from the IR alone"),
        Row("jaxptx canonical", t_parse, mb, len(ok), t_canon, ok_mb, canon_ok,   # exact: emitted, not compared
            f"canonical style ({canon_ok} emitted); not meant to be byte-exact"),
    ]
    return rows, failed


def bench_pyptx(files: list[tuple[str, str]], repeat: int) -> tuple[list[Row], list[str]] | None:
    """pyptx's rows and parse failures, or None when pyptx is not installed."""
    try:
        from pyptx.emitter import emit as pyptx_emit
        from pyptx.parser import parse as pyptx_parse
    except ImportError:
        return None

    texts = [t for _, t in files]
    mb = nbytes(texts) / 1e6
    t_parse, results = best_of(lambda: parse_all(pyptx_parse, texts), repeat)
    ok = [(m, t) for m, t in zip(results, texts) if not isinstance(m, Exception)]
    failed = [f"{p}: {type(m).__name__}: {str(m).splitlines()[0] if str(m) else ''}"[:160]
              for (p, _), m in zip(files, results) if isinstance(m, Exception)]
    modules = [m for m, _ in ok]
    ok_mb = nbytes(t for _, t in ok) / 1e6
    t_emit, emitted = best_of(lambda: emit_all(pyptx_emit, modules), repeat)
    exact = sum(e == t for e, (_, t) in zip(emitted, ok))
    rows = [Row("pyptx", t_parse, mb, len(ok), t_emit, ok_mb, exact,
                "emit returns Module.raw_source (the input text)")]

    def stripped(m: Any) -> Any:
        return dataclasses.replace(m, raw_source=None, raw_header=None)

    if all(dataclasses.is_dataclass(m) and hasattr(m, "raw_source") for m in modules):
        bare = [stripped(m) for m in modules]
        t_ir, emitted_ir = best_of(lambda: emit_all(pyptx_emit, bare), repeat)
        exact_ir = sum(e == t for e, (_, t) in zip(emitted_ir, ok))
        errors = sum(isinstance(e, Exception) for e in emitted_ir)
        rows.append(Row("pyptx IR only", t_parse, mb, len(ok), t_ir, ok_mb, exact_ir,
                        f"raw_source/raw_header cleared; {errors} emit errors"))
    return rows, failed


def fmt(x: float | None, spec: str = ".2f") -> str:
    """``x`` formatted, or ``-`` for None."""
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    """Print the table; 0 when jaxptx parsed and re-emitted every file exactly,
    1 when it did not, 2 when there is no corpus (outside ``--smoke``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=pathlib.Path, default=DEFAULT_CORPUS,
                    help=f"corpus folder (default: {DEFAULT_CORPUS})")
    ap.add_argument("--repeat", type=int, default=None, help="passes per figure; the best counts (default 3)")
    ap.add_argument("--every", type=int, default=None, metavar="K",
                    help="only every K-th file, in path order (default 1; --smoke: 10)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI smoke run: every 10th file, one pass; the example kernels' PTX without a corpus")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.smoke else 3)
    every = args.every or (10 if args.smoke else 1)
    if args.corpus.is_dir():
        files = load(args.corpus)[::every]
        where = str(args.corpus) + (f" (every {every}th file)" if every > 1 else "")
    elif args.smoke:
        print(f"corpus not found: {args.corpus}; smoke run on the example kernels' PTX instead")
        files, where = example_texts(), "examples/ (traced)"
    else:
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    if not files:
        print(f"no .ptx files under {args.corpus}", file=sys.stderr)
        return 2
    total = nbytes(t for _, t in files)
    print(f"corpus: {where}  files: {len(files)}  size: {total / 1e6:.3f} MB  "
          f"best of {repeat}  python {sys.version.split()[0]}")

    rows, jfailed = bench_jaxptx(files, repeat)
    pyptx = bench_pyptx(files, repeat)
    pfailed: list[str] = []
    if pyptx is None:
        print("pyptx not installed: jaxptx only (pip install 'jaxptx[bench]')")
    else:
        import pyptx as _p
        rows += pyptx[0]
        pfailed = pyptx[1]
        print(f"pyptx {getattr(_p, '__version__', '?')}")

    n = len(files)
    head = ("| tool | parse ms | parse MB/s | parsed ok | emit ms | emit MB/s | byte-exact | note |\n"
            "|---|---:|---:|---:|---:|---:|---:|---|")
    print()
    print(head)
    for r in rows:
        exact = "-" if r.tool.endswith("canonical") else f"{r.exact}/{r.parsed}"
        same_parse = r.tool in ("jaxptx canonical", "pyptx IR only")  # the parse row above
        parse = "(same) | (same) | (same)" if same_parse else \
            f"{r.parse_s * 1e3:.1f} | {r.parse_rate:.2f} | {r.parsed}/{n}"
        print(f"| {r.tool} | {parse} | "
              f"{fmt(None if r.emit_s is None else r.emit_s * 1e3, '.1f')} | {fmt(r.emit_rate)} | "
              f"{exact} | {r.note} |")
    if pyptx is not None:
        j, p = rows[0], next(r for r in rows if r.tool == "pyptx")
        print()
        print(f"jaxptx / pyptx parse throughput: {j.parse_rate / p.parse_rate:.2f}x")
        if j.emit_rate and p.emit_rate:
            print(f"jaxptx / pyptx emit throughput: {j.emit_rate / p.emit_rate:.3g}x "
                  "(pyptx returns its stored source text)")
        ir_row = next((r for r in rows if r.tool == "pyptx IR only"), None)
        if ir_row and j.emit_rate and ir_row.emit_rate:
            print(f"jaxptx / pyptx-IR-only emit throughput: {j.emit_rate / ir_row.emit_rate:.3g}x "
                  f"(pyptx reproduces {ir_row.exact}/{ir_row.parsed} files from its IR)")
    if jfailed:
        print(f"\njaxptx parse errors ({len(jfailed)}): " + ", ".join(jfailed))
    if pfailed:
        print(f"\npyptx parse errors ({len(pfailed)}):")
        for line in pfailed:
            print(f"  {line}")
    j = rows[0]
    canon_ok = rows[1].exact
    if jfailed or j.exact != n or canon_ok != n:
        print(f"\nFAILED: jaxptx parsed {j.parsed}/{n}, emitted {j.exact}/{n} byte for byte, "
              f"{canon_ok}/{n} in canonical style")
        return 1
    print(f"\nself-check: jaxptx parsed {n}/{n} files, emitted {n}/{n} byte for byte and "
          f"{n}/{n} in canonical style")
    return 0


if __name__ == "__main__":
    sys.exit(main())
