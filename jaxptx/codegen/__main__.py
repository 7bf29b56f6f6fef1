"""Command line: ``python -m jaxptx.codegen FILE.ptx [--name NAME] [--sugar] [-o OUT.py]``."""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

from ..errors import ParseError
from ..parse import parse
from ._writer import to_python


def main(argv: list[str] | None = None) -> int:
    """Transpile one PTX file; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m jaxptx.codegen",
                                 description="Write a jaxptx @kernel that traces back to a PTX file.")
    ap.add_argument("file", type=pathlib.Path, help="the PTX file")
    ap.add_argument("--name", help="Python name of the kernel (default: from the file name)")
    ap.add_argument("--sugar", action="store_true",
                    help="structured if/loop blocks and named parameters where the PTX allows")
    ap.add_argument("-o", "--output", type=pathlib.Path, help="write here instead of stdout")
    args = ap.parse_args(argv)
    try:
        text = args.file.read_text()
    except OSError as e:
        print(f"error: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        module = parse(text, str(args.file))
    except ParseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    name = args.name or re.sub(r"\W", "_", args.file.stem)
    if not name.isidentifier():
        name = "k_" + name
    source = to_python(module, name, sugar=args.sugar)
    if args.output is None:
        sys.stdout.write(source)
    else:
        args.output.write_text(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
