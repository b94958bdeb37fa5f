"""--large: the Garnet report's dataset, 31,073,610 keys KEY_0..KEY_31073609 with
the value "value", loaded as RESP through `redis-cli --pipe`, then
`SCAN 0 MATCH * COUNT 1000` vs `SNAPSHOT.SCAN 0 MATCH * COUNT 1000` with 10
connections (the report used memtier with 10 connections x 4 threads), and the
latency of SNAPSHOT.SCAN 0 at that size. Runs only if memory allows."""

from lib import alternate, calibrated_n, fmt, gen_strings, log, mem_available_kb, median, \
    pipe_load, rb_one

NAME = "large"
SC = "8-large"
N = 31_073_610
NEED_KB = 10 * 1024 * 1024  # about 4 GB for the server and its index, with margin


def run(ctx):
    res = ctx.results
    avail = mem_available_kb()
    if avail < NEED_KB:
        log(f"  skipped: MemAvailable {avail // 1024} MiB < {NEED_KB // 1024} MiB needed for "
            f"{N:,} keys")
        res.record(SC, "skipped", avail // 1024, "MiB available", note="not enough memory")
        return
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_strings(N, fmt="KEY_%d", value="value", chunk=200_000), expect=N,
                      timeout=1800)
        srv.wait_index(1800)
        log(f"  loaded {N:,} keys through redis-cli --pipe in {t:.0f}s "
            f"(used_memory {srv.used_memory() / 2**30:.2f} GiB, index "
            f"{srv.snap_info()['index_bytes_per_key']} B/key)")
        res.record(SC, "load_s", t, "s")
        variants = ["SCAN", "SNAPSHOT.SCAN"]
        cmds = {v: [v, 0, "MATCH", "*", "COUNT", 1000] for v in variants}
        ns = {v: calibrated_n(srv.port, ["-c", 10], cmds[v], 3.0) for v in variants}
        ops = {v: [] for v in variants}
        for r, v in alternate(3, variants):
            st = rb_one(srv.port, ["-c", 10, "-n", ns[v]] + cmds[v])
            ops[v].append(st)
            log(f"  round {r + 1} {v:14s} {fmt(st['rps']):>8} ops/s avg {st['avg']} ms")
        med = {v: median([s["rps"] for s in ops[v]]) for v in variants}
        for v in variants:
            res.record(SC, "ops_per_s", med[v], "ops/s", variant=v)
            res.record(SC, "avg_ms", median([s["avg"] for s in ops[v]]), "ms", variant=v)
        res.target(SC, "snapshot_ops_vs_native 31M", med["SNAPSHOT.SCAN"] / med["SCAN"], ">=", 3,
                   note=f"{fmt(med['SNAPSHOT.SCAN'])} vs {fmt(med['SCAN'])} ops/s")
        st = rb_one(srv.port, ["-c", 1, "-n", 10000, "SNAPSHOT.SCAN", 0])
        res.record(SC, "open_latency_p50_ms", st["p50"], "ms")
        log(f"  SNAPSHOT.SCAN 0 at {N:,} keys: p50 {st['p50']} ms")
    finally:
        srv.stop()
