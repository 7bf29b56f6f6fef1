"""Command line: ``python -m jaxptx.codegen FILE.ptx [--name NAME] [--sugar] [--unchecked] [-o OUT.py]``.

Every failure is one line on stderr and a non-zero exit: 1 for input that
is not transpilable PTX (malformed, empty, or rejected by ``jaxptx.check``
without ``--unchecked``), 2 for a file that cannot be read or written.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

from ..check import check
from ..errors import ParseError
from ..parse import parse
from ._writer import to_python

_SHOWN_DIAGNOSTICS = 5


def main(argv: list[str] | None = None) -> int:
    """Transpile one PTX file; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m jaxptx.codegen",
                                 description="Write a jaxptx @kernel that traces back to a PTX file.")
    ap.add_argument("file", type=pathlib.Path, help="the PTX file")
    ap.add_argument("--name", help="Python name of the kernel (default: from the file name)")
    ap.add_argument("--sugar", action="store_true",
                    help="structured if/loop blocks and named parameters where the PTX allows")
    ap.add_argument("--unchecked", action="store_true",
                    help="transpile PTX that jaxptx.check rejects (as a validate=False kernel)")
    ap.add_argument("-o", "--output", type=pathlib.Path, help="write here instead of stdout")
    args = ap.parse_args(argv)
    text = _read(args.file)
    if text is None:
        return 2
    try:
        module = parse(text, str(args.file))
    except ParseError as e:
        return _fail(str(e), 1)
    name = args.name or re.sub(r"\W", "_", args.file.stem)
    if not name.isidentifier():
        name = "k_" + name
    try:
        source = to_python(module, name, sugar=args.sugar)
    except ValueError as e:
        return _fail(f"{args.file}: {e}", 1)
    diagnostics = [d for d in check(module) if d.severity == "error"]
    for d in diagnostics[:_SHOWN_DIAGNOSTICS]:
        kind = "warning" if args.unchecked else "error"
        print(f"{kind}: {args.file}:{d.line}:{d.column}: {d.message}", file=sys.stderr)
    if diagnostics and not args.unchecked:
        more = len(diagnostics) - _SHOWN_DIAGNOSTICS
        return _fail(f"{args.file}: jaxptx.check found {len(diagnostics)} error(s)"
                     + (f" ({more} more not shown)" if more > 0 else "")
                     + "; fix the PTX, or pass --unchecked to transpile it as a validate=False kernel", 1)
    if args.output is None:
        sys.stdout.write(source)
        return 0
    try:
        args.output.write_text(source, encoding="utf-8")
    except OSError as e:
        return _fail(f"cannot write {args.output}: {e.strerror or e}", 2)
    return 0


def _read(path: pathlib.Path) -> str | None:
    """The file's text, or None after printing why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror or e}", 2)
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(f"cannot read {path}: not PTX text (byte {data[e.start]:#04x} at offset {e.start} is "
              "not UTF-8); give the .ptx file, not a cubin or other binary", 2)
        return None


def _fail(message: str, status: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
