"""How a `rag bench embedder` report is shown: the plot, and the Rich tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals.bench_embedder.params import REPORT_CONCURRENCY
from evals.plots import concurrency_axis, pyplot, save_figure
from evals.repeats import spread


def median_points(sweep: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per (setup, length, concurrency): the first round's point with rps, seq/s and p95 replaced by the
    medians over the rounds (what the plot draws)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for p in sweep:
        groups.setdefault((p["setup"], p["length"], p["concurrency"]), []).append(p)
    out = []
    for runs in groups.values():
        out.append({**runs[0], **{k: spread([r[k] for r in runs]).median for k in ("rps", "seq_per_s", "p95_ms")}})
    return out


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Throughput (requests/s) and p95 latency vs concurrency, one line per setup, one row per text length.

    The in-process ceiling has no concurrency: it is drawn as a dashed horizontal line at its best throughput.
    """
    sweep = median_points(report["sweep"])
    lengths = list(dict.fromkeys(p["length"] for p in sweep))
    fig, axes = pyplot().subplots(len(lengths), 2, figsize=(11, 4 * len(lengths)), squeeze=False)
    for row, length in enumerate(lengths):
        ax_tp, ax_lat = axes[row]
        for setup in dict.fromkeys(p["setup"] for p in sweep):
            pts = sorted(
                (p for p in sweep if p["setup"] == setup and p["length"] == length), key=lambda p: p["concurrency"]
            )
            if not pts:
                continue
            if setup.startswith("ceiling"):
                ax_tp.axhline(
                    pts[0]["seq_per_s"],
                    linestyle="--",
                    color="grey" if setup == "ceiling" else "black",
                    label=f"{setup} (batch {pts[0]['concurrency']})",
                )
                continue
            xs = [p["concurrency"] for p in pts]
            ax_tp.plot(xs, [p["rps"] for p in pts], marker="o", label=setup)
            ax_lat.plot(xs, [p["p95_ms"] for p in pts], marker="o", label=setup)
        mean_tokens = report["params"]["mean_tokens"].get(length)
        for ax, ylabel in ((ax_tp, "throughput (requests/s)"), (ax_lat, "p95 latency (ms)")):
            concurrency_axis(ax, report["params"]["concurrencies"], ylabel, "concurrency (requests in flight)")
            ax.set_title(f"{length} texts (~{mean_tokens} tokens)")
        ax_lat.set_yscale("log")
        ax_tp.legend(fontsize=8)
        ax_lat.legend(fontsize=8)
    m = report["machine"]
    title = (
        f"{report['params']['model']} on {m['cores']} cores ({m['cpu']}), {m['model_threads']} model threads, "
        f"{m['date_utc'][:10]}"
    )
    return save_figure(fig, path, title)


def render(report: dict[str, Any], console: Any) -> None:
    """Print the sweep, the queue-delay sweep (if any) and the target ratios as Rich tables."""
    from rich.table import Table

    m = report["machine"]
    table = Table(
        title=f"rag bench embedder: {report['params']['model']}, {m['cores']} cores ({m['cpu']}), "
        f"{m['model_threads']} model threads, load avg {m['load_average_1m_at_start']} -> "
        f"{m['load_average_1m_at_end']}, {m['date_utc']}"
    )
    columns = (
        "setup",
        "round",
        "length",
        "C / batch",
        "n",
        "req/s",
        "seq/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "mean batch",
    )
    for col in (*columns, "client cores", "server cores"):
        table.add_column(col, justify="left" if col in ("setup", "length") else "right")
    for p in report["sweep"]:
        table.add_row(
            p["setup"],
            str(p.get("round", 0) + 1),
            p["length"],
            str(p["concurrency"]),
            str(p["n"]),
            f"{p['rps']:.1f}",
            f"{p['seq_per_s']:.1f}",
            f"{p['p50_ms']:.1f}",
            f"{p['p95_ms']:.1f}",
            f"{p['p99_ms']:.1f}",
            f"{p['mean_batch']:.2f}",
            *("-" if p.get(k) is None else f"{p[k]:.2f}" for k in ("client_cpu_cores", "server_cpu_cores")),
        )
    console.print(table)
    if report.get("queue_delay_sweep"):
        delays = Table(title=f"triton_dynamic, short, concurrency {REPORT_CONCURRENCY}: max_queue_delay_microseconds")
        for col in ("delay us", "n", "req/s", "p50 ms", "p95 ms", "p99 ms", "mean batch"):
            delays.add_column(col, justify="right")
        for d in report["queue_delay_sweep"]:
            delays.add_row(
                str(d["max_queue_delay_us"]),
                str(d["n"]),
                f"{d['rps']:.1f}",
                f"{d['p50_ms']:.1f}",
                f"{d['p95_ms']:.1f}",
                f"{d['p99_ms']:.1f}",
                f"{d['mean_batch']:.2f}",
            )
        console.print(delays)
    if report.get("replicas"):
        replicas = Table(title=f"triton_replicas, short, concurrency {REPORT_CONCURRENCY}: requests served per server")
        for col in ("endpoint", "served", "share"):
            replicas.add_column(col, justify="left" if col == "endpoint" else "right")
        r = report["replicas"]
        for endpoint, served, share in zip(r["endpoints"], r["served"], r["share"], strict=True):
            replicas.add_row(endpoint, str(served), "-" if share is None else f"{share:.1%}")
        console.print(replicas)
    targets = Table(title=f"targets ({report['params']['headline']}; median (low–high) of the rounds' ratios)")
    for col in ("figure", "value", "abstracts", "target", "verdict"):
        targets.add_column(col)
    for name, t in report["targets"].items():
        value = "-" if t["value"] is None else str(t["value"])
        if t.get("spread"):
            value += f" ({t['spread']['low']}–{t['spread']['high']})"
        if t.get("value_max") is not None:
            value += f" .. {t['value_max']}"
        target = ", ".join(x for x in (t["target"], t.get("target_max")) if x)
        targets.add_row(name, value, str(t.get("value_abstract", "")), target, str(t.get("verdict") or ""))
    console.print(targets)
