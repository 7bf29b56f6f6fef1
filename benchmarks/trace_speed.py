"""Trace + emit time per instruction at 1k, 10k and 50k instructions.

The kernel body is ``n`` dependent ``add.f32``/``fma.rn.f32`` instructions
(plus a few setup lines). When ``pyptx`` is installed (``pip install
'jaxptx[bench]'``), the same-shaped kernel is traced by pyptx in the same
run and the ratio is printed. Each figure is the best of ``--repeat`` fresh
traces (a new kernel object each time, so no kernel's cache is hit; the
per-process caches of checked instruction signatures are warm after the
first), in CPU time (``time.process_time``: a busy machine slows wall time
far more than it does CPU time), the two tools' traces taking turns.

    python benchmarks/trace_speed.py [--sizes 1000 10000 50000] [--repeat 5]
    python benchmarks/trace_speed.py --smoke     # CI: 200 instructions, one trace each

Each emitted text is checked: it holds the ``n / 2`` adds and ``n / 2``
fmas (``self-check:`` lines). Without pyptx its column says so.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable


def jaxptx_builder(n: int) -> Callable[[], str]:
    """A function that traces and emits an ``n``-instruction jaxptx kernel."""
    from jaxptx import kernel, ptx, reg
    from jaxptx.types import f32

    def body() -> None:
        a = reg.scalar(f32)
        b = reg.scalar(f32)
        for i in range(n // 2):
            ptx.inst.add.f32(a, a, b)
            ptx.inst.fma.rn.f32(b, a, a, b)
        ptx.ret()

    return lambda: kernel(arch="sm_90a", name="bench")(body).ptx()


def pyptx_builder(n: int) -> Callable[[], str] | None:
    """The same kernel in pyptx, or ``None`` when pyptx is not installed."""
    try:
        from pyptx import kernel, ptx, reg
        from pyptx.types import f32
    except ImportError:
        return None

    def bench() -> None:
        a = reg.scalar(f32)
        b = reg.scalar(f32)
        for i in range(n // 2):
            ptx.inst.add.f32(a, a, b)
            ptx.inst.fma.rn.f32(b, a, a, b)
        ptx.ret()

    return lambda: kernel(arch="sm_90a")(bench).ptx()


def best_of(fns: dict[str, Callable[[], str]], repeat: int) -> dict[str, tuple[float, str]]:
    """Each function's best CPU time over ``repeat`` rounds, the functions
    taking turns within a round, with its last result."""
    best = {name: (float("inf"), "") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.process_time()
            out = fn()
            best[name] = (min(best[name][0], time.process_time() - t0), out)
    return best


def check_text(text: str, n: int, tool: str) -> None:
    """Raise AssertionError unless ``text`` holds ``n // 2`` adds and ``n // 2`` fmas."""
    adds, fmas = text.count("add.f32"), text.count("fma.rn.f32")
    assert adds == n // 2 and fmas == n // 2, f"{tool}: {adds} add.f32 and {fmas} fma.rn.f32, want {n // 2} each"


def main(argv: list[str] | None = None) -> None:
    """Print the table (``--smoke``: 200 instructions, one trace)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="instructions per kernel (default 1000 10000 50000; --smoke: 200)")
    ap.add_argument("--repeat", type=int, default=None, help="traces per figure, the best counts (default 5)")
    ap.add_argument("--smoke", action="store_true", help="CI smoke run: 200 instructions, one trace")
    args = ap.parse_args(argv)
    args.sizes = args.sizes or ([200] if args.smoke else [1000, 10000, 50000])
    args.repeat = args.repeat or (1 if args.smoke else 5)
    print(f"CPU time, best of {args.repeat}")
    print(f"{'instructions':>12} {'jaxptx ms':>10} {'µs/inst':>8} {'pyptx ms':>10} {'µs/inst':>8} {'pyptx/jaxptx':>12}")
    for n in args.sizes:
        fns = {"jaxptx": jaxptx_builder(n)}
        p = pyptx_builder(n)
        if p is not None:
            fns["pyptx"] = p
        times = best_of(fns, args.repeat)
        t_j, text = times["jaxptx"]
        check_text(text, n, "jaxptx")
        row = f"{n:>12} {t_j * 1e3:>10.1f} {t_j / n * 1e6:>8.2f}"
        if p is None:
            row += f" {'(pyptx not installed)':>32}"
        else:
            t_p, p_text = times["pyptx"]
            check_text(p_text, n, "pyptx")
            row += f" {t_p * 1e3:>10.1f} {t_p / n * 1e6:>8.2f} {t_p / t_j:>12.2f}"
        print(row, flush=True)
    print(f"self-check: every emitted kernel holds its adds and fmas "
          f"({'jaxptx and pyptx' if pyptx_builder(0) else 'jaxptx; pyptx not installed, its column skipped'})")


if __name__ == "__main__":
    main()
