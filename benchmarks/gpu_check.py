"""The whole GPU verification of jaxptx in one command, in at most ~7.5 minutes.

Meant for a borrowed GPU machine with only preinstalled packages and no
network (jax with its CUDA plugin, torch, the CUDA toolkit with
``compute-sanitizer`` and ``ncu``). From the repository root::

    python benchmarks/gpu_check.py [--out gpu_check_out] [--only STEP,...] [--skip STEP,...]
    python benchmarks/gpu_check.py --dry-run        # no GPU: check and print what would run
    python benchmarks/gpu_check.py --smoke          # CI: a dry run without a GPU; with one, the
                                                    # build and kernels.py --smoke only

Steps, in order, each one or more subprocesses with its own time budget; a
failed or timed-out step is recorded and the next one runs:

1. ``build``: ``pip install --no-build-isolation --no-deps -e .``, then
   ``import jaxptx._ffi``;
2. ``tests``: every ``gpu``-marked test (``pytest -m gpu``);
3. ``kernels``: ``benchmarks/kernels.py`` (the kernel library against
   cuBLAS / cuDNN / XLA: times, TFLOPS, GB/s, fraction of peak);
4. ``memcheck`` and 5. ``racecheck``: ``compute-sanitizer`` over
   ``benchmarks/gpu_sanitize_driver.py`` (library kernels through
   ``jax.jit`` on the GPU, checked against numpy);
6. ``ncu``: Nsight Compute's global sectors per request, shared-memory bank
   conflicts and occupancy for the driver's kernels, beside
   ``jaxptx.profile``'s predictions for the same launches on the emulator;
7. ``torch``: library kernels through ``jaxptx.torch.op`` on CUDA tensors;
8. ``capture``: the driver with ``JAXPTX_CAPTURE_DIR`` set, then
   ``python -m jaxptx.replay FILE --json`` for each capture written.

``--out DIR`` gets ``results.json`` (machine, versions, each step's command,
status ``ok``/``failed``/``timeout``/``skipped``, seconds, parsed figures and
the tail of its output), ``results.md`` (tables ready for
``benchmarks/RESULTS.md``) and ``logs/`` (each step's full output). Exit
status 0 when every step that ran passed, else 1. ``--dry-run`` builds and
runs nothing on a GPU: it checks imports, the scripts, which tools are
found, and writes the same files with every step ``would run``.

This file is the command line: the options, the order of the steps, their
shared time and the summary. Beside it: ``_gpu_steps.py`` (each step's
commands and the reading of their output), ``_gpu_parse.py`` (the readers of
the tools' output), ``_gpu_machine.py`` (tools, the children's environment,
running a command with a deadline, machine facts) and ``_gpu_report.py``
(``results.json``, ``results.md``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path
from typing import Any

from _gpu_machine import Context, find_tool, gpu_listed, machine_info, preflight
from _gpu_report import step_record, summary_rows, write_reports
from _gpu_steps import STEPS, Clock, Outcome


def select(only: str | None, skip: str | None) -> set[str]:
    """The keys of the steps to run from ``--only`` / ``--skip`` (keys or names, comma-separated).

    Raises:
        SystemExit: a name that is no step's.
    """
    by = {s.key: s.key for s in STEPS} | {s.name: s.key for s in STEPS}

    def keys(text: str | None) -> set[str]:
        out = set()
        for part in (text or "").split(","):
            part = part.strip().lower()
            if part:
                if part not in by:
                    raise SystemExit(f"gpu_check: no step {part!r}; steps: {', '.join(s.key for s in STEPS)}")
                out.add(by[part])
        return out
    chosen = keys(only) or {s.key for s in STEPS}
    return chosen - keys(skip)


def parse_budgets(items: list[str]) -> dict[str, float]:
    """``{step key: seconds}`` from ``--budget STEP=SECONDS`` items (a key or a name).

    Raises:
        SystemExit: not ``STEP=SECONDS``, no such step, or not a positive number.
    """
    out = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or seconds <= 0:
            raise SystemExit(f"gpu_check: --budget takes STEP=SECONDS (seconds > 0), got {item!r}")
        (key,) = select(name, None)
        out[key] = seconds
    return out


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--dry-run`` describe) the steps; write the reports; 0 when all passed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="steps: " + ", ".join(f"{s.key} ({s.name})" for s in STEPS))
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="where the results go")
    ap.add_argument("--only", help="run only these steps (comma-separated keys or names)")
    ap.add_argument("--skip", help="skip these steps (comma-separated)")
    ap.add_argument("--dry-run", action="store_true", help="check and describe; build and run nothing on a GPU")
    ap.add_argument("--smoke", action="store_true",
                    help="CI smoke run: without a GPU (nvidia-smi lists none) a --dry-run; with one, only the "
                         "build and kernels steps (unless --only/--skip), kernels.py in its --smoke mode")
    ap.add_argument("--repeat", type=int, default=5, help="kernels.py --repeat (default 5)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every step's budget (default 1)")
    ap.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS",
                    help="one step's budget, e.g. --budget kernels=120 (repeatable; after --time-scale)")
    args = ap.parse_args(argv)
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    if args.smoke and not args.dry_run:
        if gpu_listed(find_tool("nvidia-smi")):
            if not (args.only or args.skip):
                args.only = "build,kernels"
            print(f"gpu_check: smoke run on the GPU: steps {args.only or 'all'} minus {args.skip or 'none'}")
        else:
            args.dry_run = True
            print("gpu_check: smoke run, no GPU (nvidia-smi lists none): the GPU steps are skipped; "
                  "checking them as a dry run")
    chosen = select(args.only, args.skip)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(out, sys.executable, args.repeat, args.dry_run, smoke=args.smoke)
    budgets = {s.key: s.budget * args.time_scale for s in STEPS}
    budgets.update(parse_budgets(args.budget))
    total = sum(budgets[k] for k in chosen)
    print(f"gpu_check: {'dry run, ' if args.dry_run else ''}results in {out}")
    print("budget (s): " + ", ".join(f"{s.key} {budgets[s.key]:.0f}" for s in STEPS if s.key in chosen)
          + f"; total {total:.0f} ({total / 60:.1f} min; time a step leaves unused carries to the next; "
          f"plus a preflight of seconds)")
    if ctx.env_added or ctx.env_removed:
        print("child environment: " + ", ".join([f"+{k}" for k in ctx.env_added]
                                                + [f"-{k}" for k in ctx.env_removed]))
    doc: dict[str, Any] = {"tool": "benchmarks/gpu_check.py", "argv": raw_argv, "dry_run": args.dry_run,
                           "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                           "machine": machine_info(ctx), "tools": ctx.tools,
                           "env_added": ctx.env_summary(),
                           "env_removed": ctx.env_removed,
                           "budget_s": {"total": total, "steps": {k: budgets[k] for k in budgets if k in chosen}},
                           "steps": []}
    problems: list[str] = []
    print("tools: " + ", ".join(f"{k} {'found' if p else 'not found'}" for k, p in ctx.tools.items()))

    def check_first() -> None:
        """The preflight, once: before the first step, or after the build when it runs first."""
        if "preflight" in doc:
            return
        pre = ctx.preflight = doc["preflight"] = preflight(ctx)
        doc["imports"] = pre.get("imports", {})
        print("imports: " + ", ".join(f"{k} {v}" for k, v in doc["imports"].items())
              + (f"; {pre['error']}" if "error" in pre else ""))
        print(f"jaxptx detects: {pre.get('detect_arch')}; ptxas: {pre.get('ptxas')}; "
              f"JAX devices: {pre.get('jax_devices')}", flush=True)
        if args.dry_run:
            for m in ("numpy", "jax", "jaxptx"):
                if doc["imports"].get(m) != "ok":
                    problems.append(f"import {m}: {doc['imports'].get(m, pre.get('error', 'not checked'))}")

    slack = 0.0
    for i, step in enumerate(STEPS, 1):
        if step.key != "build" or args.dry_run:
            check_first()
        if step.key not in chosen:
            doc["steps"].append(step_record(step, ctx, budgets[step.key], "skipped", step.plan(ctx),
                                        "not selected (--only/--skip)"))
            continue
        cmds = step.plan(ctx)
        if args.dry_run:
            needs = step.needs(ctx)
            problems += [f"{step.name}: {n}" for n in needs]
            doc["steps"].append(step_record(step, ctx, budgets[step.key], "would run", cmds, "; ".join(needs)))
            print(f"[{i}/{len(STEPS)}] {step.name}: would run (budget {budgets[step.key]:.0f} s)"
                  + "".join(f"\n    {c.text()}" for c in cmds)
                  + (f"\n    PROBLEM: {'; '.join(needs)}" if needs else ""))
            continue
        timeout = budgets[step.key] + slack
        print(f"[{i}/{len(STEPS)}] {step.name} (timeout {timeout:.0f} s) ...", flush=True)
        t0 = time.monotonic()
        try:
            outcome = step.execute(ctx, Clock(timeout))
        except Exception as e:  # noqa: BLE001 - a bug in one step's handling must not stop the rest
            outcome = Outcome("failed", f"gpu_check error in this step: {type(e).__name__}: {e}")
        took = time.monotonic() - t0
        slack = max(0.0, timeout - took)
        doc["steps"].append(step_record(step, ctx, budgets[step.key], outcome.status, cmds, outcome.why, took, timeout,
                                    outcome))
        print(f"    -> {outcome.status} in {took:.1f} s" + (f": {outcome.why[:300]}" if outcome.why else ""),
              flush=True)
        write_reports(out, doc)           # after each step: a run cut short keeps what it did
    check_first()
    doc["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    ran = [r for r in doc["steps"] if r["status"] not in ("skipped", "would run")]
    doc["passed"] = (not problems) if args.dry_run else all(r["status"] == "ok" for r in ran)
    doc["problems"] = problems
    write_reports(out, doc)
    print()
    widths = [16, 10, 8, 9]
    print(f"{'step':16} {'status':10} {'seconds':>8} {'budget s':>9}  why")
    for row in summary_rows(doc["steps"]):
        print(f"{row[0]:{widths[0]}} {row[1]:{widths[1]}} {row[2]:>{widths[2]}} {row[3]:>{widths[3]}}  {row[4]}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"\n{'passed' if doc['passed'] else 'FAILED'}; results: {out / 'results.json'}, {out / 'results.md'}")
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
