"""Pictures of a :class:`~.report.Profile` (matplotlib, an optional extra:
``pip install matplotlib``).

* :func:`heatmap`: per executed memory line (or Python source line), the
  global sectors per request over the ideal and the shared wavefronts per
  request over the ideal — where the traffic is wasted.
* :func:`bank_map`: one warp's shared access of one instruction: lanes
  against the 32 banks, each cell coloured by the wavefront (pass) that
  serves it, so a column with many colours is a conflict.
"""

from __future__ import annotations

from typing import Any

__all__ = ["heatmap", "bank_map"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("jaxptx.profile's pictures need matplotlib: pip install matplotlib") from None
    return plt


def _rows(p: Any, by: str) -> list[tuple[str, dict[str, float]]]:
    """``(label, sums)`` per memory line, or per Python source line."""
    keys = ("global_requests", "global_sectors", "global_ideal_sectors", "shared_requests",
            "shared_wavefronts", "shared_ideal_wavefronts", "shared_bank_conflicts")
    rows: dict[str, dict[str, float]] = {}
    for e in p.lines:
        if not (e["global_requests"] or e["shared_requests"]):
            continue
        if by == "source" and e["source"]:
            label = e["source"].rsplit("/", 1)[-1]
        else:
            text = e["instruction"]
            label = f"{e['line']}: {text if len(text) <= 48 else text[:45] + '...'}"
        acc = rows.setdefault(label, {k: 0.0 for k in keys})
        for k in keys:
            acc[k] += e[k]
    return list(rows.items())


def heatmap(p: Any, metric: str = "auto", *, by: str = "ptx", ax: Any = None) -> Any:
    """A heat map over the memory lines of ``p``.

    Args:
        p: the profile.
        metric: ``"auto"`` (both columns), ``"sectors"`` (global sectors per
            request / ideal) or ``"conflicts"`` (shared wavefronts per request
            / ideal).
        by: ``"ptx"`` (one row per PTX line) or ``"source"`` (rows summed per
            Python line of a traced kernel).
        ax: a matplotlib Axes to draw into (default: a new figure).

    Returns:
        The matplotlib Figure.
    """
    import numpy as np
    plt = _pyplot()
    rows = _rows(p, by)
    columns = {"sectors": ("sectors / ideal", "global_sectors", "global_ideal_sectors"),
               "conflicts": ("wavefronts / ideal", "shared_wavefronts", "shared_ideal_wavefronts")}
    chosen = list(columns) if metric == "auto" else [metric]
    data = np.zeros((max(1, len(rows)), len(chosen)))
    for i, (_, acc) in enumerate(rows):
        for j, name in enumerate(chosen):
            _, got, ideal = columns[name]
            data[i, j] = acc[got] / acc[ideal] if acc[ideal] else np.nan     # blank: no such requests
    if ax is None:
        fig, ax = plt.subplots(figsize=(3 + 2 * len(chosen), 1 + 0.3 * max(1, len(rows))))
    else:
        fig = ax.figure
    top = max(2.0, float(np.nanmax(data))) if np.isfinite(data).any() else 2.0
    image = ax.imshow(data, aspect="auto", cmap="Reds", vmin=1.0, vmax=top)
    ax.set_xticks(range(len(chosen)), [columns[c][0] for c in chosen])
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=7)
    for i in range(len(rows)):
        for j in range(len(chosen)):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.1f}x", ha="center", va="center", fontsize=7,
                        color="white" if data[i, j] > 0.6 * top else "black")
    ax.set_title(f"{p.name}: traffic over the ideal (1.0x = ideal)", fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def bank_map(p: Any, line: int | str, *, ax: Any = None) -> Any:
    """Lanes x banks of one warp's shared access of ``line`` (a PTX line
    number, or text in its instruction: the first executed match).

    Raises:
        KeyError: no shared access was recorded for that line.
    """
    import numpy as np
    plt = _pyplot()
    if isinstance(line, str):
        hits = [e["line"] for e in p.lines if line in e["instruction"] and e["line"] in p.samples]
        if not hits:
            raise KeyError(f"no executed shared-memory instruction contains {line!r}")
        line = hits[0]
    sample = p.samples.get(line)
    if sample is None:
        raise KeyError(f"PTX line {line} made no shared-memory request")
    grid = np.full((32, 32), np.nan)
    for a in sample["accesses"]:
        grid[a["lane"], a["bank"]] = a["pass"]
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 6))
    else:
        fig = ax.figure
    passes = int(np.nanmax(grid)) + 1 if np.isfinite(grid).any() else 1
    ax.imshow(grid, cmap=plt.get_cmap("viridis", max(passes, 2)), vmin=-0.5, vmax=max(passes, 2) - 0.5,
              aspect="auto")
    per = sample["lanes_per_phase"]
    for b in range(per, 32, per):
        ax.axhline(b - 0.5, color="white", linewidth=1.5)
    ax.set_xlabel("bank = (address / 4) % 32")
    ax.set_ylabel(f"lane (phases of {per} lanes, {sample['width']}-byte accesses)")
    entry = p.line(line)
    ax.set_title(f"line {line}: {entry['instruction'][:60]}\nwarp {sample['warp']}: colour = pass; "
                 f"{entry['wavefronts_per_request']:.1f} wavefronts/request", fontsize=9)
    fig.tight_layout()
    return fig
