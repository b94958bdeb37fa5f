"""Runs the snapscan benchmark scenarios; called by scripts/bench.sh.

    run.py --tmp DIR [--quick] [--large] [--server NAME] [--only SCENARIOS]

SCENARIOS: comma-separated names or numbers (1 interference, 2 percall,
3 invalidation, 4 hscan, 5 memory, 6 writes, 7 scale, 8 large, 9 pinned, 10 unlink,
11 native, 12 survival).
"""

import argparse
import importlib
import os
import platform
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lib  # noqa: E402
from lib import Ctx, Results, Sclient, install_signal_handlers, loadavg, log, stop_all  # noqa: E402

MODULES = ["s1_interference", "s2_percall", "s3_invalidation", "s4_hscan", "s5_memory",
           "s6_writes", "s7_scale", "s8_large", "s9_pinned", "s10_unlink", "s11_native",
           "s12_survival"]


def select(only, large):
    mods = [importlib.import_module(m) for m in MODULES]
    if not only:
        return [m for m in mods if m.NAME != "large" or large]
    want = [w.strip().lower() for w in only.split(",") if w.strip()]
    out = []
    for w in want:
        hit = [m for i, m in enumerate(mods) if w in (m.NAME, str(i + 1), m.SC.lower())]
        if not hit:
            sys.exit(f"bench: unknown scenario '{w}' (known: "
                     f"{', '.join(f'{i + 1} {m.NAME}' for i, m in enumerate(mods))})")
        out += [m for m in hit if m not in out]
    return out


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = lib.mem_available_kb()
    total = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            total = int(line.split()[1])
    return dict(nproc=os.cpu_count(), cpu=cpu, mem_total_gib=round(total / 2**20, 1),
                mem_available_gib=round(mem / 2**20, 1), kernel=platform.release())


def revision():
    """HEAD and whether the module's sources differ from it (they are built as they are)."""
    if os.environ.get("SNAPSCAN_MODULE"):
        return f"SNAPSCAN_MODULE={lib.MODULE}" + (
            f" ({os.environ['SNAPSCAN_MODULE_REV']})" if os.environ.get("SNAPSCAN_MODULE_REV") else "")
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=lib.ROOT,
                              capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "Cargo.toml",
                                "Cargo.lock"], cwd=lib.ROOT, capture_output=True, text=True,
                               timeout=30).stdout.split("\n")
        n = len([d for d in dirty if d.strip()])
        return head + (f" + {n} uncommitted change(s) in src/" if n else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def pin(a):
    """Applies --server-cpus/--load-cpus/--io-threads; returns a description or ''.
    The load generators (sclient, redis-benchmark, redis-cli) are this process's
    children and inherit its affinity; servers get theirs in lib.Server.start."""
    parts = []
    if a.server_cpus:
        lib.PIN["server_cpus"] = lib.parse_cpus(a.server_cpus)
        parts.append(f"servers on CPUs {a.server_cpus}")
    if a.load_cpus:
        os.sched_setaffinity(0, lib.parse_cpus(a.load_cpus))
        parts.append(f"load generators and probes on CPUs {a.load_cpus}")
    if a.server_cpus and a.load_cpus and \
            lib.PIN["server_cpus"] & lib.parse_cpus(a.load_cpus):
        sys.exit("bench: --server-cpus and --load-cpus overlap")
    if a.io_threads is not None:
        if a.io_threads < 1:
            sys.exit("bench: --io-threads must be >= 1")
        lib.PIN["io_threads"] = a.io_threads
        parts.append(f"io-threads {a.io_threads}")
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--server", default="valkey-9.1")
    ap.add_argument("--only", default="")
    ap.add_argument("--server-cpus", default="")
    ap.add_argument("--load-cpus", default="")
    ap.add_argument("--io-threads", type=int, default=None)
    a = ap.parse_args()
    install_signal_handlers()
    pinning = pin(a)
    mods = select(a.only, a.large)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    mode = "quick" if a.quick else "full"
    results = Results(run_id, mode, a.server)
    started = time.time()
    try:
        sclient = Sclient(a.tmp)
        ctx = Ctx(a.quick, a.large, a.server, a.tmp, results, sclient)
        ver = subprocess.run([ctx.binary, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        m = machine()
        log(f"bench: run {run_id}, {mode} mode, server {a.server} ({ver.split(' sha=')[0]}), "
            f"module built from {revision()}")
        log(f"bench: {m['nproc']} cores ({m['cpu']}), {m['mem_total_gib']} GiB RAM "
            f"({m['mem_available_gib']} GiB available), load average {' '.join(loadavg())}")
        if pinning:
            log(f"bench: {pinning}")
            results.record("0-meta", "pinning", pinning)
        else:
            log("bench: the server, the load generators, scanners and probes share these cores")
        for k, v in m.items():
            results.record("0-meta", k, v)
        results.record("0-meta", "server_version", ver.split(" sha=")[0])
        results.record("0-meta", "revision", revision())
        results.record("0-meta", "loadavg_start", " ".join(loadavg()))
        results.record("0-meta", "scenarios", " ".join(mm.NAME for mm in mods))
        for i, mod in enumerate(mods):
            log(f"\n=== [{i + 1}/{len(mods)}] {mod.SC} ===")
            t0 = time.time()
            try:
                mod.run(ctx)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - report and go on with the next scenario
                traceback.print_exc()
                results.record(mod.SC, "error", "", status="ERROR", note=str(e)[:300])
                log(f"  ERROR in {mod.SC}: {e}")
            finally:
                stop_all()
            dt = time.time() - t0
            results.record(mod.SC, "scenario_seconds", dt, "s")
            log(f"  ({mod.SC} took {dt:.0f}s, load average {' '.join(loadavg())})")
        total = time.time() - started
        results.record("0-meta", "loadavg_end", " ".join(loadavg()))
        results.record("0-meta", "total_seconds", total, "s")
        log(f"\n=== summary ({mode}, {total:.0f}s) ===")
        for r in results.rows:
            if r["status"]:
                v = r["value"]
                vs = f"{v:.3f}" if isinstance(v, float) else str(v)
                log(f"  {r['status']:5s} {r['scenario']:16s} {r['metric']:45s} {vs:>10} "
                    f"(target {r['target']})" if r["target"] else
                    f"  {r['status']:5s} {r['scenario']:16s} {r['metric']:45s} {r['note']}")
        import report
        path = report.write(results.rows)
        log(f"\nbench: results appended to {results.csv}; report: {path}")
    except KeyboardInterrupt as e:
        log(f"bench: interrupted ({e})")
        return 130
    finally:
        stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
