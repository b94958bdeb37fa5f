"""Writes bench/REPORT.md and its PNG charts from one run's result rows.

    python report.py [RUN_ID]     regenerate from bench/results.csv (default: last run)
"""

import csv
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:  # charts are optional: a prepared offline directory (bench.sh --prepare) may lack matplotlib
    import matplotlib  # noqa: E402

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
    from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402
except ImportError:
    plt = None

from lib import BENCH_DIR  # noqa: E402

TITLES = OrderedDict([
    ("1-interference", "1. Interference (KeyDB experiment)"),
    ("2-percall", "2. Per-call throughput (Garnet report)"),
    ("3-invalidation", "3. Cache invalidation (Dragonfly post-mortem)"),
    ("4-hscan", "4. HSCAN (Qunar report)"),
    ("5-memory", "5. Memory"),
    ("6-writes", "6. Write overhead"),
    ("7-scale", "7. Scale"),
    ("8-large", "8. Large (Garnet dataset, --large)"),
    ("9-pinned", "9. Pinned versions (1024 iterations under writes)"),
])


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def get(rows, sc, metric):
    return [(r["variant"], num(r["value"])) for r in rows
            if r["scenario"] == sc and r["metric"] == metric and num(r["value"]) is not None]


def meta(rows, key):
    for r in rows:
        if r["scenario"] == "0-meta" and r["metric"] == key:
            return r["value"]
    return ""


def fmtv(v):
    f = num(v)
    if f is None:
        return str(v)
    if f == int(f) and abs(f) >= 100:
        return f"{int(f):,}"
    if abs(f) >= 1000:
        return f"{f:,.0f}"
    return f"{f:.3g}" if abs(f) >= 0.01 else f"{f:.4g}"


def bar(ax, items, title, ylabel, log=False, line=None, line_label=None, colors=None):
    if not items:
        ax.set_visible(False)
        return
    labels = [i[0] for i in items]
    vals = [i[1] for i in items]
    ax.bar(range(len(vals)), vals, color=colors or ["#4c72b0", "#dd8452", "#55a868", "#c44e52",
                                                   "#8172b3", "#937860", "#da8bc3"][:len(vals)])
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmtv(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if line is not None:
        ax.axhline(line, color="red", linestyle="--", linewidth=1, label=line_label)
        ax.legend(fontsize=7)
    for i, v in enumerate(vals):
        ax.annotate(fmtv(v), (i, v), ha="center", va="bottom", fontsize=7)


def chart(name, panels):
    """panels: list of (items, title, ylabel, kwargs). Returns the file name or None."""
    panels = [p for p in panels if p[0]]
    if not panels:
        return None
    width = [max(5, 1.5 * len(p[0])) for p in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(width), 3.8),
                             gridspec_kw={"width_ratios": width})
    if len(panels) == 1:
        axes = [axes]
    for ax, (items, title, ylabel, kw) in zip(axes, panels):
        bar(ax, items, title, ylabel, **kw)
    fig.tight_layout()
    path = BENCH_DIR / name
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return name


def charts(rows):
    out = {}
    sc = "1-interference"
    out[sc] = chart("interference.png", [
        (get(rows, sc, "thr"), "GET+SET throughput per phase", "ops/s", {}),
        (get(rows, sc, "get_p99"), "GET p99 per phase", "ms", {}),
        (get(rows, sc, "scan_rate"), "keys scanned per second by the 4 scanners", "keys/s", {}),
    ])
    sc = "2-percall"
    out[sc] = chart("percall.png", [
        (get(rows, sc, "ops_per_s"), "calls/s, 10 connections, cursor 0, COUNT 1000", "ops/s",
         {"log": True}),
        (get(rows, sc, "open_latency_p50_us"), "SNAPSHOT.SCAN 0 latency p50 (1 connection)", "us",
         {}),
    ])
    sc = "3-invalidation"
    out[sc] = chart("invalidation.png", [
        (get(rows, sc, "invalidation_ms"), "time per invalidation (scan loop + DEL)", "ms",
         {"log": True}),
        (get(rows, sc, "bg_get_p99"), "background GET p99 while invalidating", "ms", {}),
    ])
    sc = "4-hscan"
    out[sc] = chart("hscan.png", [
        (get(rows, sc, "stall_max_ms"), "longest main-thread stall (PING probe max)", "ms",
         {"log": True, "line": 5, "line_label": "target 5 ms"}),
        (get(rows, sc, "cpu_us_per_iteration"), "server CPU per full iteration, 2,000-field listpack",
         "us", {}),
    ])
    sc = "5-memory"
    items = []
    for metric, short in [("index_memory_bytes_per_key", "INFO"), ("rss_delta_per_key", "RSS")]:
        for v, x in get(rows, sc, metric):
            items.append((f"{short}\n{v}", x))
    out[sc] = chart("memory.png", [
        (items, "index bytes per key, key bytes included (targets: seq 16, user 24, uuid 48)",
         "bytes/key", {}),
    ])
    sc = "6-writes"
    panels = []
    for what, line in [("snapscan/noop all threads", 1.3), ("snapscan/none all threads", 1.35),
                       ("snapscan/noop main thread", 1.10)]:
        items = [(r["metric"].split(":")[0], num(r["value"])) for r in rows
                 if r["scenario"] == sc and r["metric"].endswith(what) and num(r["value"]) is not None]
        panels.append((items, f"server CPU per write: {what}", "ratio",
                       {"line": line, "line_label": f"target {line}"}))
    out[sc] = chart("writes.png", panels)
    sc = "9-pinned"
    items = [(m.replace("_bytes", "").replace("_", " "), x / 2**20) for m in
             ["index_bytes", "heap_after_pinning_bytes", "peak_heap_bytes", "heap_end_bytes"]
             for _, x in get(rows, sc, m)]
    out[sc] = chart("pinned.png", [(items, "module heap with 1024 pinned versions", "MiB", {})])
    sc = "7-scale"
    times = [(f"DEBUG RELOAD\n{v}", x) for v, x in get(rows, sc, "debug_reload_s")]
    times += [(f"DEBUG POPULATE\n{v}", x) for v, x in get(rows, sc, "debug_populate_s")]
    times += [("MODULE LOAD\nbackfill", x) for _, x in get(rows, sc, "backfill_s")]
    stalls = [("probe max\nduring backfill", x) for _, x in get(rows, sc, "backfill_probe_max_ms")]
    stalls += [("probe max\nidle", x) for _, x in get(rows, sc, "idle_probe_max_ms")]
    stalls += [("longest lock\nhold (INFO)", x) for _, x in
               [(r["metric"], num(r["value"])) for r in rows if r["scenario"] == sc and
                r["metric"] == "backfill_longest_lock_hold_ms"] if x is not None]
    out[sc] = chart("scale.png", [
        (times, "index build times", "s", {}),
        (stalls, "main-thread stalls during MODULE LOAD backfill", "ms",
         {"line": 5, "line_label": "target 5 ms"}),
    ])
    return out


def write(rows, path=None):
    BENCH_DIR.mkdir(exist_ok=True)
    path = path or BENCH_DIR / "REPORT.md"
    try:
        pics = charts(rows) if plt is not None else {}
    except Exception as e:  # noqa: BLE001 - a chart problem must not lose the report
        print(f"report: charts failed: {e}", file=sys.stderr)
        pics = {}
    mode = rows[0]["mode"] if rows else "?"
    L = []
    L.append(f"# snapscan benchmark report ({mode} run {rows[0]['run_id'] if rows else '?'})\n")
    L.append(f"Server **{meta(rows, 'server_version')}** ({rows[0]['server'] if rows else '?'}); "
             f"machine: {meta(rows, 'nproc')} cores ({meta(rows, 'cpu')}), "
             f"{meta(rows, 'mem_total_gib')} GiB RAM, kernel {meta(rows, 'kernel')}. "
             f"Module built from {meta(rows, 'revision')}. "
             f"Load average at start {meta(rows, 'loadavg_start')}, at end {meta(rows, 'loadavg_end')}. "
             f"Total time {fmtv(meta(rows, 'total_seconds'))} s.\n")
    pin = meta(rows, "pinning")
    if pin:
        L.append(f"Pinning: {pin}. Variants ran alternately (A B A B ...); figures are medians "
                 "over rounds.\n")
    else:
        L.append("The server, the load generator (redis-benchmark), the scanners, probes and "
                 "invalidation loops (scripts/bench/sclient.c) and the module's worker threads all "
                 "share these cores: figures that depend on CPU contention (throughput, tail "
                 "latency, probe maxima) are those of this small machine, not of a dedicated "
                 "server. Variants ran alternately (A B A B ...); figures are medians over rounds.\n")
    if mode == "quick":
        L.append("**These are `--quick` figures** (smaller datasets, shorter runs).\n")
    L.append("## Targets\n")
    L.append("| scenario | target | measured | status | details |")
    L.append("|---|---|---|---|---|")
    for r in rows:
        if r["status"] and r["target"]:
            L.append(f"| {r['scenario']} | {r['metric']} {r['target']} | {fmtv(r['value'])} | "
                     f"**{r['status']}** | {r['note']} |")
    errs = [r for r in rows if r["status"] == "ERROR" and not r["target"]]
    if errs:
        L.append("\n### Errors\n")
        for r in errs:
            L.append(f"- {r['scenario']}: {r['note']}")
    for sc, title in TITLES.items():
        srows = [r for r in rows if r["scenario"] == sc and not r["status"]]
        if not srows:
            continue
        L.append(f"\n## {title}\n")
        if pics.get(sc):
            L.append(f"![{sc}]({pics[sc]})\n")
        L.append("| metric | variant | value | unit |")
        L.append("|---|---|---|---|")
        for r in srows:
            L.append(f"| {r['metric']} | {r['variant']} | {fmtv(r['value'])} | {r['unit']} |")
    L.append("\nRaw rows: `bench/results.csv` (appended by every run; columns run_id, time, mode, "
             "server, scenario, metric, variant, value, unit, target, status, note).\n")
    path.write_text("\n".join(L) + "\n")
    return path


def main():
    with open(BENCH_DIR / "results.csv") as f:
        rows = list(csv.DictReader(f))
    run_id = sys.argv[1] if len(sys.argv) > 1 else rows[-1]["run_id"]
    rows = [r for r in rows if r["run_id"] == run_id]
    print(write(rows))


if __name__ == "__main__":
    main()
