"""Figure helpers shared by the benchmarks (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def concurrency_axis(ax: Any, concurrencies: Sequence[int], ylabel: str, xlabel: str) -> None:
    """Log2 x axis ticked at `concurrencies` with plain numbers, labels and a light grid."""
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(concurrencies))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def save_figure(fig: Any, path: Path, title: str) -> Path:
    """Title `fig`, lay it out, write it to `path` (110 dpi; parent folders created) and close it."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def emit_report(report: dict[str, Any], as_json: bool, output: Path | None, render: Any) -> None:
    """Write `report` to `output` (indented JSON) when given, then print it: one JSON object on stdout
    (`as_json`), or `render(report, console)` and the paths of the plot (`report["plot"]`, when it has one) and of
    the JSON file."""
    import json

    from rich.console import Console

    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2) + "\n")
    if as_json:
        print(json.dumps(report))
        return
    console = Console()
    render(report, console)
    paths = ([f"plot: {report['plot']}"] if "plot" in report else []) + ([f"JSON: {output}"] if output else [])
    if paths:
        console.print("; ".join(paths))
