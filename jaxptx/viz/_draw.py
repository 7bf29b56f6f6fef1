"""Drawing helpers shared by the figures: matplotlib is imported here, on
first use, so ``import jaxptx.viz`` costs nothing without it."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["pyplot", "cell_grid", "figure_with_data"]

# Eight colours a reader can tell apart (Okabe-Ito, colour-blind safe), light.
_PALETTE = ("#a6cee3", "#fdbf6f", "#b2df8a", "#fb9a99", "#cab2d6", "#ffff99", "#d9d9d9", "#80cdc1")


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported on first use (the backend is the
    user's: inline in a notebook, Agg on a machine without a display).

    Raises:
        ImportError: matplotlib is not installed (``pip install matplotlib``,
            or jaxptx's ``docs`` extra).
    """
    try:
        import matplotlib.pyplot as plt     # optional dependency: only jaxptx.viz needs it
    except ImportError as e:                # pragma: no cover - exercised without matplotlib
        raise ImportError("jaxptx.viz needs matplotlib: pip install matplotlib "
                          "(or the 'docs' extra of jaxptx)") from e
    return plt


def figure_with_data(fig: Any, data: Any, **extra: Any) -> Any:
    """Attach the numbers a figure shows (``fig.data``, plus named extras) and
    return the figure."""
    fig.data = data
    for k, v in extra.items():
        setattr(fig, k, v)
    return fig


def cell_grid(ax: Any, colour_key: np.ndarray, labels: np.ndarray | None, *, title: str = "",
              xlabel: str = "", ylabel: str = "", fontsize: float = 6.0, tick_every: int = 1) -> None:
    """Draw a (rows, cols) grid of cells on ``ax``: each cell coloured by
    ``colour_key`` (ints, -1 grey) and labelled with ``labels`` (strings)."""
    from matplotlib.colors import ListedColormap
    key = np.asarray(colour_key)
    rows, cols = key.shape
    cmap = ListedColormap(("#ffffff",) + _PALETTE)
    shown = np.where(key < 0, 0, key % len(_PALETTE) + 1)
    ax.imshow(shown, cmap=cmap, vmin=0, vmax=len(_PALETTE), aspect="equal", interpolation="nearest")
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="#606060", linewidth=0.4)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(np.arange(0, cols, tick_every))
    ax.set_yticks(np.arange(0, rows, tick_every))
    ax.tick_params(labelsize=7, top=True, labeltop=True, bottom=False, labelbottom=False)
    ax.xaxis.set_label_position("top")
    if labels is not None:
        for (r, c), text in np.ndenumerate(labels):
            if text:
                ax.text(c, r, text, ha="center", va="center", fontsize=fontsize, family="monospace")
    if title:
        ax.set_title(title, fontsize=10, pad=22)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
