"""Scenario 1, interference (KeyDB experiment): a GET/SET workload alone, then
while 4 clients iterate the whole keyspace again and again with native
`SCAN cursor COUNT 1000`, then with `SNAPSHOT.SCAN cursor COUNT 1000`."""

import time

from lib import Sclient, alternate, fmt, log, median, pipe_load, gen_strings, redis_benchmark

NAME = "interference"
SC = "1-interference"
SCANNERS = 4


def run(ctx):
    n_keys = ctx.pick(200_000, 1_000_000)
    n_req = ctx.pick(100_000, 300_000)
    rounds = 3
    res = ctx.results
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_strings(n_keys), expect=n_keys)
        srv.wait_index()
        log(f"  loaded {n_keys:,} keys key:%012d (16-byte values) in {t:.1f}s")
        phases = ["baseline", "SCAN", "SNAPSHOT.SCAN"]
        m = {p: [] for p in phases}
        for r, ph in alternate(rounds, phases):
            scanners = []
            if ph != "baseline":
                for _ in range(SCANNERS):
                    scanners.append(ctx.sclient.start(srv.port, "loop", ["--seconds", 600],
                                                      [ph, "{}", "COUNT", 1000]))
                time.sleep(0.3)
            t0 = time.time()
            th0 = srv.thread_times()
            try:
                out = redis_benchmark(srv.port, ["-t", "set,get", "-c", 50, "-n", n_req,
                                                 "-r", n_keys, "-d", 16])
            finally:
                sc = [Sclient.finish(p) for p in scanners]
            wall = time.time() - t0
            th1 = srv.thread_times()
            main_wait = (th1["main"][1] - th0["main"][1]) / wall
            workers = sum(th1[k][0] - th0.get(k, (0, 0))[0] for k in th1 if "worker" in k) / wall
            s, g = out["SET"], out["GET"]
            thr = 2 * n_req / (n_req / s["rps"] + n_req / g["rps"])
            items = sum(x["items"] for x in sc)
            iters = sum(x["iterations"] for x in sc)
            errs = sum(x["errors"] for x in sc)
            scan_rate = items / wall if sc else 0
            m[ph].append(dict(thr=thr, set_rps=s["rps"], get_rps=g["rps"],
                              get_p50=g["p50"], get_p99=g["p99"], get_p999=g.get("p999"),
                              set_p50=s["p50"], set_p99=s["p99"], set_p999=s.get("p999"),
                              scan_rate=scan_rate, iters=iters, errs=errs,
                              main_runq=main_wait, worker_cpu=workers))
            log(f"  round {r + 1} {ph:14s} ops/s {fmt(thr):>8} (SET {fmt(s['rps'])}, GET "
                f"{fmt(g['rps'])})  GET p50/p99/p999 {g['p50']}/{g['p99']}/{g.get('p999')} ms  "
                f"SET p99 {s['p99']} ms  main thread waiting for a CPU {main_wait * 100:.0f}% "
                f"of the time, workers {workers * 100:.0f}% of a core"
                + (f"  scanners: {fmt(scan_rate)} keys/s, {iters} full iterations, {errs} errors"
                   if sc else ""))
        log("  medians:")
        med = {p: {k: median([x[k] for x in m[p]]) for k in m[p][0]} for p in phases}
        for p in phases:
            d = med[p]
            log(f"    {p:14s} ops/s {fmt(d['thr']):>8}  GET p50 {d['get_p50']:.3f} p99 "
                f"{d['get_p99']:.3f} p999 {fmt(d['get_p999'])} ms  SET p99 {d['set_p99']:.3f} ms"
                f"  scanned keys/s {fmt(d['scan_rate'])}  main thread runnable-waiting "
                f"{d['main_runq'] * 100:.0f}%, workers {d['worker_cpu'] * 100:.0f}% of a core")
            for k, unit in [("thr", "ops/s"), ("set_rps", "ops/s"), ("get_rps", "ops/s"),
                            ("get_p50", "ms"), ("get_p99", "ms"), ("get_p999", "ms"),
                            ("set_p50", "ms"), ("set_p99", "ms"), ("set_p999", "ms"),
                            ("scan_rate", "keys/s"), ("iters", "iterations"), ("errs", "errors"),
                            ("main_runq", "fraction of wall time"),
                            ("worker_cpu", "cores")]:
                res.record(SC, k, d[k], unit, variant=p)
        b = med["baseline"]
        for p in ["SCAN", "SNAPSHOT.SCAN"]:
            log(f"    {p}: throughput {med[p]['thr'] / b['thr']:.3f}x baseline, GET p99 "
                f"{med[p]['get_p99'] / b['get_p99']:.2f}x baseline")
        scan_errs = med["SNAPSHOT.SCAN"]["errs"] + med["SCAN"]["errs"]
        res.target(SC, "snapshot_throughput_vs_baseline", med["SNAPSHOT.SCAN"]["thr"] / b["thr"],
                   ">=", 0.95,
                   note=f"native SCAN: {med['SCAN']['thr'] / b['thr']:.3f}x; scanner errors "
                        f"{scan_errs}")
        res.target(SC, "snapshot_get_p99_vs_baseline",
                   med["SNAPSHOT.SCAN"]["get_p99"] / b["get_p99"], "<=", 1.3,
                   note=f"native SCAN: {med['SCAN']['get_p99'] / b['get_p99']:.2f}x")
    finally:
        srv.stop()
