"""Scenario 9, deletion by pattern (issue 11): users x 10 keys `user:<id>:<n>`;
invalidating one user = deleting `user:<id>:*` with
  - SNAPSHOT.UNLINK user:<id>:*           (one call; redis-py, so it includes
                                           ~50 us of Python per call)
  - a native SCAN MATCH loop + DEL        (sclient, as scenario 3)
  - a SNAPSHOT.SCAN MATCH loop + DEL      (sclient, as scenario 3).
Time per invalidation, and GET p99 of a background redis-benchmark workload
while invalidations run back to back (each followed by a refill of the user's
keys, so the keyspace stays the same).
Then one SNAPSHOT.UNLINK of 1,000,000 keys: the longest main-thread stall (max
latency of a PING probe in another process; target <= 2 ms), the module's own
longest slice, and GET p99 during the deletion."""

import threading
import time

import redis

from lib import Probe, Sclient, alternate, fmt, gen_users, log, median, pipe_load, redis_benchmark
from s3_invalidation import Ids

NAME = "unlink"
SC = "10-unlink"
BIG = 1_000_000


class UnlinkLoop(threading.Thread):
    """SNAPSHOT.UNLINK user:<id>:* back to back (cycling ids), each followed
    by a refill of the user's 10 keys; times exclude the refill."""

    def __init__(self, port, ids, refill=True, max_n=None, rate=None):
        super().__init__(daemon=True)
        self.rate = rate
        self.r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
        self.ids, self.refill, self.max_n = ids, refill, max_n
        self.stop_flag = threading.Event()
        self.times, self.keys, self.error = [], 0, None

    def run(self):
        i = 0
        t0 = time.perf_counter()
        try:
            while not self.stop_flag.is_set() and (self.max_n is None or i < self.max_n):
                uid = self.ids[i % len(self.ids)]
                if self.rate:
                    due = t0 + i / self.rate
                    if due > time.perf_counter():
                        self.stop_flag.wait(due - time.perf_counter())
                        if self.stop_flag.is_set():
                            break
                i += 1
                t = time.perf_counter()
                n = self.r.execute_command("SNAPSHOT.UNLINK", f"user:{uid:012d}:*")
                self.times.append((time.perf_counter() - t) * 1e6)
                self.keys += n
                if self.refill:
                    self.r.mset({f"user:{uid:012d}:{k}": "x" * 16 for k in range(10)})
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.error = e

    def finish(self):
        self.stop_flag.set()
        self.join(60)
        if self.error:
            raise RuntimeError(f"SNAPSHOT.UNLINK loop: {self.error}")
        return self


def run(ctx):
    res = ctx.results
    users = ctx.pick(20_000, 100_000)
    rounds = ctx.pick(1, 3)
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_users(users), expect=users * 10)
        srv.wait_index()
        log(f"  loaded {users:,} users x 10 keys = {users * 10:,} keys in {t:.1f}s")
        ids = Ids(ctx, users)

        # 1. Time per invalidation.
        batch = {"SCAN": ctx.pick(4, 5), "SNAPSHOT.SCAN": ctx.pick(100, 300),
                 "SNAPSHOT.UNLINK": ctx.pick(300, 1000)}
        times = {v: [] for v in batch}
        for r, v in alternate(rounds, list(batch)):
            batch_ids = ids.take(batch[v])
            if v == "SNAPSHOT.UNLINK":
                lo = UnlinkLoop(srv.port, batch_ids, refill=False, max_n=len(batch_ids))
                lo.start()
                lo.join(600)
                lo.finish()
                keys, tus = lo.keys, lo.times
            else:
                out = ctx.sclient.run(srv.port, "inval", ["--scan", v, "--ids",
                                                          ids.file(batch_ids)])
                if out["errors"]:
                    raise RuntimeError(f"{v}: {out['first_error']}")
                keys, tus = out["keys"], out["times_us"]
            if keys != 10 * len(batch_ids):
                raise RuntimeError(f"{v}: {keys} keys for {len(batch_ids)} users")
            times[v] += tus
            log(f"  round {r + 1} {v:16s} {len(batch_ids)} invalidations, median "
                f"{median(tus) / 1000:.3f} ms")
        med = {v: median(times[v]) / 1000 for v in times}
        for v in times:
            res.record(SC, "invalidation_ms", med[v], "ms", variant=v)
        res.target(SC, "unlink_vs_native_scan_loop", med["SCAN"] / med["SNAPSHOT.UNLINK"], ">=",
                   100, note=f"{med['SCAN']:.2f} ms vs {med['SNAPSHOT.UNLINK']:.3f} ms per "
                             f"invalidation at {users * 10:,} keys; SNAPSHOT.SCAN+DEL "
                             f"{med['SNAPSHOT.SCAN']:.3f} ms")

        # 2. GET p99 while invalidations run back to back (with refills).
        n_get = ctx.pick(100_000, 300_000)
        # "SNAPSHOT.UNLINK paced": at the rate the native loop reached, for a
        # comparison at equal work.
        phases = ["baseline", "SCAN", "SNAPSHOT.SCAN", "SNAPSHOT.UNLINK",
                  "SNAPSHOT.UNLINK paced"]
        native_rate = None
        stats = {p: [] for p in phases}
        rest = ids.take(len(ids.ids))
        loop_file = ids.file(rest)
        for r, ph in alternate(rounds, phases):
            loop = ul = None
            if ph in ("SCAN", "SNAPSHOT.SCAN"):
                loop = ctx.sclient.start(srv.port, "inval", ["--scan", ph, "--ids", loop_file,
                                                            "--wrap", "--refill",
                                                            "--seconds", 600])
            elif ph.startswith("SNAPSHOT.UNLINK"):
                ul = UnlinkLoop(srv.port, rest,
                                rate=(native_rate or 5) if ph.endswith("paced") else None)
                ul.start()
            if loop or ul:
                time.sleep(0.2)
            t0 = time.time()
            try:
                g = next(iter(redis_benchmark(srv.port, [
                    "-c", 50, "-n", n_get, "-r", users, "GET", "user:__rand_int__:0"]).values()))
            finally:
                done = None
                if loop:
                    lo = Sclient.finish(loop)
                    if lo["errors"]:
                        raise RuntimeError(f"{ph}: {lo['first_error']}")
                    done = lo["n"]
                if ul:
                    done = len(ul.finish().times)
            wall = time.time() - t0 + (0.2 if done is not None else 0)
            rate = done / wall if done is not None else 0
            if ph == "SCAN":
                native_rate = rate
            stats[ph].append(dict(p50=g["p50"], p99=g["p99"], rps=g["rps"], rate=rate))
            log(f"  round {r + 1} {ph:16s} GET {fmt(g['rps']):>8} ops/s p50/p99 "
                f"{g['p50']}/{g['p99']} ms" + (f"  {fmt(rate)} invalidations/s"
                                               if done is not None else ""))
        medp = {p: {k: median([x[k] for x in stats[p]]) for k in stats[p][0]} for p in phases}
        for p in phases:
            for k, unit in [("p50", "ms"), ("p99", "ms"), ("rps", "ops/s"),
                            ("rate", "invalidations/s")]:
                res.record(SC, f"bg_get_{k}", medp[p][k], unit, variant=p)
        b = medp["baseline"]["p99"]
        u = medp["SNAPSHOT.UNLINK"]
        pa = medp["SNAPSHOT.UNLINK paced"]
        res.target(SC, "bg_get_p99_vs_baseline", u["p99"] / b, "<=", 1.5,
                   note=f"baseline {b:.3f} ms, SNAPSHOT.UNLINK {u['p99']:.3f} ms at "
                        f"{fmt(u['rate'])} inval/s; SCAN loop {medp['SCAN']['p99']:.3f} ms at "
                        f"{fmt(medp['SCAN']['rate'])} inval/s; SNAPSHOT.SCAN loop "
                        f"{medp['SNAPSHOT.SCAN']['p99']:.3f} ms at "
                        f"{fmt(medp['SNAPSHOT.SCAN']['rate'])} inval/s; SNAPSHOT.UNLINK paced at "
                        f"the native rate {pa['p99']:.3f} ms ({pa['p99'] / b:.2f}x)")

        # 3. One deletion of 1M keys: stalls and GET p99 during it (a fresh
        # server per round: the module's slice maxima are its own).
        srv.stop()
        big = {}
        for r in range(rounds):
            srv = ctx.server(module=True)
            srv.r.set("other", "v")
            n_big_get = ctx.pick(150_000, 300_000)
            # The same GET load without a deletion: what the probe sees anyway
            # on this machine.
            probe = Probe(ctx, srv.port)
            gi = next(iter(redis_benchmark(srv.port, [
                "-c", 20, "-n", n_big_get, "GET", "other"]).values()))
            pi = probe.stop()
            srv.populate(BIG, prefix="big")
            probe = Probe(ctx, srv.port)
            holder = {}

            def get_load():
                holder["g"] = next(iter(redis_benchmark(srv.port, [
                    "-c", 20, "-n", n_big_get, "GET", "other"]).values()))

            th = threading.Thread(target=get_load, daemon=True)
            th.start()
            time.sleep(0.3)
            t = time.perf_counter()
            n = srv.r.execute_command("SNAPSHOT.UNLINK", "big:*")
            took = time.perf_counter() - t
            th.join(600)
            p = probe.stop()
            if n != BIG or srv.r.dbsize() != 1:
                raise RuntimeError(f"1M deletion: {n} unlinked, {srv.r.dbsize()} keys left")
            si = srv.snap_info()
            g = holder.get("g", {})
            big.setdefault("took_s", []).append(took)
            big.setdefault("stall_ms", []).append(p["max_us"] / 1000)
            big.setdefault("slice_ms", []).append(int(si["unlink_longest_slice_us"]) / 1000)
            big.setdefault("slice_cpu_ms", []).append(
                int(si["unlink_longest_slice_cpu_us"]) / 1000)
            big.setdefault("get_p99_ms", []).append(g.get("p99"))
            big.setdefault("blocked", []).append(int(si["unlink_slices_blocked"]))
            big.setdefault("idle_stall_ms", []).append(pi["max_us"] / 1000)
            big.setdefault("idle_get_p99_ms", []).append(gi["p99"])
            log(f"  round {r + 1} SNAPSHOT.UNLINK of {BIG:,} keys: {took:.2f} s, probe max "
                f"{p['max_us'] / 1000:.2f} ms (p99.9 {p['p999_us'] / 1000:.2f} ms), longest "
                f"slice {int(si['unlink_longest_slice_us']) / 1000:.2f} ms wall, "
                f"{int(si['unlink_longest_slice_cpu_us']) / 1000:.2f} ms CPU, "
                f"{si['unlink_slices_blocked']} of {si['unlink_slices']} slices blocked on a lock, "
                f"GET p99 {g.get('p99')} ms during/around it; without a deletion: probe max "
                f"{pi['max_us'] / 1000:.2f} ms, GET p99 {gi['p99']} ms")
            srv.stop()
        for k, unit in [("took_s", "s"), ("stall_ms", "ms"), ("slice_ms", "ms"),
                        ("slice_cpu_ms", "ms"), ("get_p99_ms", "ms"),
                        ("blocked", "slices"), ("idle_stall_ms", "ms"),
                        ("idle_get_p99_ms", "ms")]:
            res.record(SC, f"unlink_1m_{k}", median(big[k]), unit)
        res.target(SC, "unlink_1m_stall_ms", median(big["stall_ms"]), "<=", 2, unit=" ms",
                   note=f"probe max (median of rounds); module's longest slice "
                        f"{median(big['slice_ms']):.2f} ms wall, "
                        f"{median(big['slice_cpu_ms']):.2f} ms CPU; probe max without a deletion "
                        f"{median(big['idle_stall_ms']):.2f} ms; {median(big['took_s']):.2f} s for "
                        f"{BIG:,} keys")
    finally:
        srv.stop()
