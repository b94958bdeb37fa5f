"""Scenario 3, cache invalidation (Dragonfly post-mortem): users x 10 keys
`user:<id>:<n>`; an invalidation = a full cursor loop `MATCH user:<id>:*`
(COUNT 1000) + one DEL of the keys found. Time per invalidation with native
SCAN vs SNAPSHOT.SCAN, the keys both find, and the GET p99 of a background
redis-benchmark workload while invalidations run back to back."""

import random
import time
from collections import defaultdict

from lib import Sclient, alternate, fmt, gen_users, log, median, pipe_load, redis_benchmark

NAME = "invalidation"
SC = "3-invalidation"


class Ids:
    """Hands out distinct user ids (shuffled), written to files for sclient."""

    def __init__(self, ctx, users):
        self.ids = list(range(users))
        random.Random(42).shuffle(self.ids)
        self.pos = 0
        self.dir = ctx.tmp
        self.files = 0

    def take(self, n):
        n = min(n, len(self.ids) - self.pos)
        out = self.ids[self.pos:self.pos + n]
        self.pos += n
        return out

    def file(self, ids):
        self.files += 1
        p = self.dir / f"ids-{self.files}.txt"
        p.write_text("".join(f"{i:012d}\n" for i in ids))
        return str(p)


def run(ctx):
    users = ctx.pick(20_000, 100_000)
    rounds = 3
    res = ctx.results
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_users(users), expect=users * 10)
        srv.wait_index()
        log(f"  loaded {users:,} users x 10 keys = {users * 10:,} keys in {t:.1f}s")
        ids = Ids(ctx, users)

        # 1. Both find the same keys (and exactly the user's 10 keys).
        check = ids.take(20)
        found = {}
        for v in ["SCAN", "SNAPSHOT.SCAN"]:
            dump = ctx.tmp / f"found-{v}.txt"
            out = ctx.sclient.run(srv.port, "inval", ["--scan", v, "--ids", ids.file(check),
                                                      "--nodel", "--dump", dump])
            keys = defaultdict(set)
            for line in open(dump):
                i, k = line.split()
                keys[i].add(k)
            found[v] = keys
            if out["errors"]:
                raise RuntimeError(f"{v}: {out['first_error']}")
        expected = {f"{i:012d}": {f"user:{i:012d}:{n}" for n in range(10)} for i in check}
        same = found["SCAN"] == found["SNAPSHOT.SCAN"] == expected
        res.target(SC, "same_keys_found", 1 if same else 0, ">=", 1, unit="",
                   note=f"{len(check)} users, {sum(len(v) for v in found['SNAPSHOT.SCAN'].values())}"
                        f" keys by SNAPSHOT.SCAN, {sum(len(v) for v in found['SCAN'].values())} by SCAN")

        # 2. Time per invalidation (scan loop + DEL), alternating batches.
        batch = {"SCAN": ctx.pick(4, 5), "SNAPSHOT.SCAN": ctx.pick(100, 300)}
        times = {"SCAN": [], "SNAPSHOT.SCAN": []}
        calls = {"SCAN": 0, "SNAPSHOT.SCAN": 0}
        for r, v in alternate(rounds, ["SCAN", "SNAPSHOT.SCAN"]):
            batch_ids = ids.take(batch[v])
            out = ctx.sclient.run(srv.port, "inval", ["--scan", v, "--ids", ids.file(batch_ids)])
            if out["errors"] or out["keys"] != 10 * len(batch_ids):
                raise RuntimeError(f"{v}: {out['keys']} keys for {len(batch_ids)} users, "
                                   f"errors: {out['first_error']}")
            times[v] += out["times_us"]
            calls[v] += out["calls"]
            log(f"  round {r + 1} {v:14s} {len(batch_ids)} invalidations, median "
                f"{median(out['times_us']) / 1000:.3f} ms, {out['calls'] / len(batch_ids):.0f} "
                f"scan calls each")
        med = {v: median(times[v]) / 1000 for v in times}
        for v in times:
            res.record(SC, "invalidation_ms", med[v], "ms", variant=v)
            res.record(SC, "scan_calls_per_invalidation", calls[v] / len(times[v]), "calls",
                       variant=v)
        res.target(SC, "invalidation_speedup", med["SCAN"] / med["SNAPSHOT.SCAN"], ">=", 100,
                   note=f"{med['SCAN']:.2f} ms vs {med['SNAPSHOT.SCAN']:.3f} ms per invalidation "
                        f"at {users * 10:,} keys")

        # 3. GET p99 of a background workload while invalidations run back to back
        # (each followed by a refill of the user's keys, as a cache refills, so the
        # keyspace stays the same however many run). "SNAPSHOT.SCAN paced" runs
        # at the rate the native loop reached, for comparison at equal work.
        n_get = ctx.pick(100_000, 300_000)
        phases = ["baseline", "SCAN", "SNAPSHOT.SCAN", "SNAPSHOT.SCAN paced"]
        stats = {p: [] for p in phases}
        loop_ids = ids.file(ids.take(len(ids.ids)))  # the rest, cycled (--wrap)
        native_rate = None
        for r, ph in alternate(rounds, phases):
            loop = None
            if ph != "baseline":
                opts = ["--scan", ph.split()[0], "--ids", loop_ids, "--wrap", "--refill",
                        "--seconds", 600]
                if ph.endswith("paced"):
                    opts += ["--rate", f"{native_rate or 20:.2f}"]
                loop = ctx.sclient.start(srv.port, "inval", opts)
                time.sleep(0.2)
            t0 = time.time()
            th0 = srv.thread_times()
            try:
                g = next(iter(redis_benchmark(srv.port, [
                    "-c", 50, "-n", n_get, "-r", users, "GET", "user:__rand_int__:0"]).values()))
            finally:
                lo = Sclient.finish(loop) if loop else None
            th1 = srv.thread_times()
            main_wait = (th1["main"][1] - th0["main"][1]) / (time.time() - t0)
            wall = time.time() - t0 + (0.2 if loop else 0)
            rate = lo["n"] / wall if lo else 0
            if ph == "SCAN":
                native_rate = rate
            if lo and lo["errors"]:
                raise RuntimeError(f"{ph}: {lo['first_error']}")
            stats[ph].append(dict(p50=g["p50"], p99=g["p99"], p999=g.get("p999"), rps=g["rps"],
                                  rate=rate, main_runq=main_wait))
            log(f"  round {r + 1} {ph:19s} GET {fmt(g['rps']):>8} ops/s p50/p99/p999 "
                f"{g['p50']}/{g['p99']}/{g.get('p999')} ms  main thread waiting for a CPU "
                f"{main_wait * 100:.0f}%"
                + (f"  {fmt(rate)} invalidations/s ({lo['n']} done, {lo['keys']} keys deleted)"
                   if lo else ""))
        med = {p: {k: median([x[k] for x in stats[p]]) for k in stats[p][0]} for p in phases}
        for p in phases:
            for k, unit in [("p50", "ms"), ("p99", "ms"), ("p999", "ms"), ("rps", "ops/s"),
                            ("rate", "invalidations/s"), ("main_runq", "fraction of wall time")]:
                res.record(SC, f"bg_get_{k}", med[p][k], unit, variant=p)
        b = med["baseline"]["p99"]
        sp = med["SNAPSHOT.SCAN"]
        pa = med["SNAPSHOT.SCAN paced"]
        res.target(SC, "bg_get_p99_vs_baseline", sp["p99"] / b, "<=", 1.2,
                   note=f"baseline {b:.3f} ms, SNAPSHOT {sp['p99']:.3f} ms at {fmt(sp['rate'])} "
                        f"inval/s back to back; native SCAN {med['SCAN']['p99']:.3f} ms "
                        f"({med['SCAN']['p99'] / b:.1f}x) at {fmt(med['SCAN']['rate'])} inval/s; "
                        f"SNAPSHOT paced at the native rate {pa['p99']:.3f} ms "
                        f"({pa['p99'] / b:.2f}x)")
    finally:
        srv.stop()
