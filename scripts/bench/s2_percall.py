"""Scenario 2, per-call throughput (Garnet report): `SCAN 0 MATCH * COUNT 1000`
vs `SNAPSHOT.SCAN 0 MATCH * COUNT 1000` with 10 connections at 1M keys, and the
sparse `MATCH *22*`; then the latency of `SNAPSHOT.SCAN 0` on a small vs a big
keyspace (open is O(1))."""

import os

from lib import alternate, calibrated_n, fmt, log, median, rb_one

NAME = "percall"
SC = "2-percall"


def errors(srv):
    return int(srv.info("stats").get("total_error_replies", 0))


def cpu_per_call(before, after, st):
    """Microseconds of CPU per call: the server's main thread, the module's
    threads (snapscan-*), and the load generator."""
    def delta(pred):
        return sum(after[n][0] - before.get(n, (0.0, 0.0))[0] for n in after if pred(n))
    calls = st.get("requests") or 1
    return {
        "main_us": delta(lambda n: n == "main") / calls * 1e6,
        "module_us": delta(lambda n: n.startswith("snapscan")) / calls * 1e6,
        "client_us": st["client_cpu_s"] / calls * 1e6,
    }


def run(ctx):
    n_keys = 1_000_000
    rounds = 3
    secs = ctx.pick(1.0, 3.0)
    res = ctx.results
    srv = ctx.server(module=True)
    small = None
    try:
        t = srv.populate(n_keys)
        log(f"  DEBUG POPULATE {n_keys:,} (index complete {t:.1f}s after the command returned)")
        mem0, err0 = srv.used_memory(), errors(srv)
        summary = {}
        for pattern in ["*", "*22*"]:
            variants = ["SCAN", "SNAPSHOT.SCAN"]
            cmds = {v: [v, 0, "MATCH", pattern, "COUNT", 1000] for v in variants}
            # keys one call returns (the benchmark always sends cursor 0)
            per_call = {v: len(srv.r.execute_command(*cmds[v])[1]) for v in variants}
            ns = {v: calibrated_n(srv.port, ["-c", 10], cmds[v], secs) for v in variants}
            ops = {v: [] for v in variants}
            for r, v in alternate(rounds, variants):
                t0 = srv.thread_times()
                st = rb_one(srv.port, ["-c", 10, "-n", ns[v]] + cmds[v])
                st.update(cpu_per_call(t0, srv.thread_times(), st))
                ops[v].append(st)
                log(f"  round {r + 1} {v:14s} MATCH {pattern:5s} {fmt(st['rps']):>8} ops/s  "
                    f"p50 {st['p50']} p99 {st['p99']} ms ({ns[v]} calls); CPU per call: main "
                    f"thread {st['main_us']:.1f} us, module threads {st['module_us']:.1f} us, "
                    f"redis-benchmark {st['client_us']:.1f} us")
            for v in variants:
                rps = median([s["rps"] for s in ops[v]])
                p50 = median([s["p50"] for s in ops[v]])
                p99 = median([s["p99"] for s in ops[v]])
                summary[(pattern, v)] = rps
                res.record(SC, "ops_per_s", rps, "ops/s", variant=f"{v} MATCH {pattern}")
                res.record(SC, "p50_ms", p50, "ms", variant=f"{v} MATCH {pattern}")
                res.record(SC, "p99_ms", p99, "ms", variant=f"{v} MATCH {pattern}")
                res.record(SC, "keys_per_call", per_call[v], "keys", variant=f"{v} MATCH {pattern}")
                res.record(SC, "keys_per_s", rps * per_call[v], "keys/s",
                           variant=f"{v} MATCH {pattern}")
                for k, what in [("main_us", "main_thread"), ("module_us", "module_threads"),
                                ("client_us", "load_generator")]:
                    res.record(SC, f"cpu_per_call_{what}", median([s[k] for s in ops[v]]), "us",
                               variant=f"{v} MATCH {pattern}")
                log(f"    median {v:14s} MATCH {pattern:5s} {fmt(rps):>8} ops/s, {per_call[v]} "
                    f"keys/call -> {fmt(rps * per_call[v])} keys/s")
            ratio = summary[(pattern, "SNAPSHOT.SCAN")] / summary[(pattern, "SCAN")]
            kr = ratio * per_call["SNAPSHOT.SCAN"] / max(1, per_call["SCAN"])
            cpu = {v: {k: median([s[k] for s in ops[v]]) for k in ("main_us", "module_us",
                                                                  "client_us")} for v in variants}
            # What the 2 cores allow: the load generator alone needs client_us
            # per call of SNAPSHOT.SCAN, so even a server costing nothing could
            # not exceed ncpu / client_us calls per second.
            ceiling = os.cpu_count() / (cpu["SNAPSHOT.SCAN"]["client_us"] / 1e6)
            ceiling_ratio = ceiling / summary[(pattern, "SCAN")]
            main_ratio = cpu["SCAN"]["main_us"] / max(0.01, cpu["SNAPSHOT.SCAN"]["main_us"])
            res.target(SC, f"snapshot_ops_vs_native MATCH {pattern}", ratio, ">=", 3,
                       note=f"keys/s ratio {kr:.2f}x ({per_call['SNAPSHOT.SCAN']} vs "
                            f"{per_call['SCAN']} keys per call); ceiling on {os.cpu_count()} "
                            f"cores set by redis-benchmark's own CPU: {ceiling_ratio:.2f}x")
            res.record(SC, "ops_ceiling_vs_native", ceiling_ratio, "x", variant=f"MATCH {pattern}",
                       note=f"{os.cpu_count()} cores / redis-benchmark CPU per call "
                            f"{cpu['SNAPSHOT.SCAN']['client_us']:.1f} us")
            res.record(SC, "main_thread_cpu_ratio", main_ratio, "x", variant=f"MATCH {pattern}",
                       note=f"native {cpu['SCAN']['main_us']:.1f} us / snapshot "
                            f"{cpu['SNAPSHOT.SCAN']['main_us']:.1f} us of main-thread CPU per call")
            log(f"    main-thread CPU per call: SCAN {cpu['SCAN']['main_us']:.1f} us, SNAPSHOT.SCAN "
                f"{cpu['SNAPSHOT.SCAN']['main_us']:.1f} us ({main_ratio:.2f}x less; module threads "
                f"{cpu['SNAPSHOT.SCAN']['module_us']:.1f} us); ceiling for any server with this load "
                f"generator on {os.cpu_count()} cores: {ceiling_ratio:.2f}x native")
        mem1, err1 = srv.used_memory(), errors(srv)
        si = srv.snap_info()
        growth = (mem1 - mem0) / mem0
        log(f"  used_memory before {mem0:,} after {mem1:,} ({growth * 100:+.2f}%), open "
            f"snapshots {si['open_snapshots']}, error replies {err1 - err0}")
        res.record(SC, "used_memory_before", mem0, "bytes")
        res.record(SC, "used_memory_after", mem1, "bytes")
        res.target(SC, "error_replies", err1 - err0, "<=", 0, unit="")
        res.target(SC, "used_memory_growth_pct", growth * 100, "<=", 1.0, unit="%",
                   note=f"{mem0:,} -> {mem1:,} bytes; {si['open_snapshots']} cursors open")

        # Latency of SNAPSHOT.SCAN 0 (open + first page of 10) small vs big.
        big_n = ctx.pick(1_000_000, 10_000_000)
        small_n = 100_000
        if big_n > n_keys:
            t = srv.populate(big_n)
            log(f"  DEBUG POPULATE {big_n:,} (index complete {t:.1f}s after the command returned)")
        small = ctx.server(module=True)
        small.populate(small_n)
        # One connection, calls one after another; per-call latency measured by
        # sclient with microsecond resolution (redis-benchmark's histogram
        # buckets are ~8 us wide at this scale).
        reqs = ctx.pick(5000, 20000)
        lat = {"small": [], "big": []}
        for r, v in alternate(rounds, ["small", "big"]):
            s = small if v == "small" else srv
            st = ctx.sclient.run(s.port, "repeat", ["--repeat", reqs], ["SNAPSHOT.SCAN", 0])
            if st["errors"]:
                raise RuntimeError(f"SNAPSHOT.SCAN 0: {st['first_error']}")
            lat[v].append(st)
            log(f"  round {r + 1} SNAPSHOT.SCAN 0 at {small_n if v == 'small' else big_n:>10,} keys: "
                f"p50 {st['p50_us']} us, mean {st['mean_us']:.1f} us, p99 {st['p99_us']} us")
        for v, n in [("small", small_n), ("big", big_n)]:
            for k in ["p50_us", "mean_us", "p99_us"]:
                res.record(SC, f"open_latency_{k}", median([x[k] for x in lat[v]]), "us",
                           variant=f"{n:,} keys")
        p50s = {v: median([x["p50_us"] for x in lat[v]]) for v in lat}
        means = {v: median([x["mean_us"] for x in lat[v]]) for v in lat}
        res.target(SC, f"open_latency_ratio {big_n // 1_000_000}M/100k", p50s["big"] / p50s["small"],
                   "<=", 1.2,
                   note=f"p50 {p50s['small']:.0f} vs {p50s['big']:.0f} us (1 connection, "
                        f"calls back to back); mean ratio {means['big'] / means['small']:.2f}")
    finally:
        srv.stop()
        if small:
            small.stop()
