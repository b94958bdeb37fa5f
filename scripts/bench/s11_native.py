"""Scenario 11, the native commands served from snapshots (issue 18): the same
clients, unchanged, with `snapshot.serve-native` none (native) and all (served),
on one server (the mode is switched with CONFIG SET between variants).

1. `redis-cli --scan` over the keyspace (SCAN c COUNT 10 until cursor 0): the
   main thread's CPU for one whole loop on a quiet server, then the GET p99 of
   a redis-benchmark workload while the loop runs again and again.
2. `KEYS *`: the longest stall a PING loop sees while it runs (target <= 5 ms
   with the mode on).
3. A `delete_matched`-style invalidation (Rails' RedisCacheStore:
   `SCAN c MATCH p COUNT 1000` to the end, then DEL of the keys found) of 10,000
   keys: time per invalidation, and GET p99 while invalidations run back to back
   (each followed by a refill, so the keyspace stays the same).
"""

import os
import signal
import subprocess
import time

import redis

from lib import Probe, Sclient, alternate, fmt, gen_users, log, median, pipe_load, redis_benchmark

NAME = "native"
SC = "11-native"
CONFIG = "snapshot.serve-native"
VARIANTS = ["native", "served"]
MODE = {"native": "none", "served": "all"}
# ids 000000000000-000000000999: 1,000 users x 10 keys = 10,000 keys
INVAL_ID = "000000000*"


def set_mode(srv, variant):
    srv.r.execute_command("CONFIG", "SET", CONFIG, MODE[variant])


def served_calls(srv):
    i = srv.r.info("snapshot")
    return int(i["snapshot_scans_served"])


def main_cpu(srv):
    """The main thread's CPU seconds (schedstat, nanosecond resolution)."""
    return srv.thread_times()["main"][0]


def cli_scan(port, timeout=900):
    """One `redis-cli --scan` to the end; returns (keys printed, seconds)."""
    t0 = time.time()
    p = subprocess.Popen(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--scan"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    n = 0
    for _ in p.stdout:
        n += 1
        if time.time() - t0 > timeout:
            p.kill()
            raise RuntimeError("redis-cli --scan took too long")
    err = p.stderr.read().decode(errors="replace")
    if p.wait(timeout=60) != 0:
        raise RuntimeError(f"redis-cli --scan failed: {err.strip()}")
    return n, time.time() - t0


def cli_scan_loop(port, seconds):
    """`redis-cli --scan` again and again in a shell loop (bounded by `seconds`)."""
    script = (f"end=$((SECONDS + {int(seconds)})); while ((SECONDS < end)); do "
              f"redis-cli -h 127.0.0.1 -p {port} --scan >/dev/null || exit 1; done")
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def stop_loop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def run(ctx):
    users = ctx.pick(20_000, 100_000)
    n_keys = users * 10
    rounds = 3
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_users(users), expect=n_keys)
        srv.wait_index()
        log(f"  loaded {n_keys:,} keys user:<id>:<n> in {t:.1f}s")
        part_cli_scan(ctx, srv, n_keys, rounds)
        part_keys(ctx, srv, n_keys, rounds)
        part_delete_matched(ctx, srv, users, rounds)
    finally:
        srv.stop()


def part_cli_scan(ctx, srv, n_keys, rounds):
    res = ctx.results
    log(f"  -- redis-cli --scan over {n_keys:,} keys")
    cpu = {v: [] for v in VARIANTS}
    wall = {v: [] for v in VARIANTS}
    for r, v in alternate(rounds, VARIANTS):
        set_mode(srv, v)
        s0, c0 = served_calls(srv), main_cpu(srv)
        n, dt = cli_scan(srv.port)
        c1, s1 = main_cpu(srv), served_calls(srv)
        if n != n_keys:
            raise RuntimeError(f"redis-cli --scan ({v}) printed {n} keys of {n_keys}")
        if (s1 > s0) != (v == "served"):
            raise RuntimeError(f"redis-cli --scan ({v}): snapshot_scans_served went {s0} -> {s1}")
        cpu[v].append(c1 - c0)
        wall[v].append(dt)
        log(f"  round {r + 1} {v:7s} main thread {1000 * (c1 - c0):8.1f} ms CPU, {dt:.2f} s wall, "
            f"{s1 - s0} calls served from snapshots")
    med = {v: median(cpu[v]) for v in VARIANTS}
    for v in VARIANTS:
        res.record(SC, "cli_scan_main_cpu_ms", 1000 * med[v], "ms", variant=v)
        res.record(SC, "cli_scan_wall_s", median(wall[v]), "s", variant=v)
    res.target(SC, "cli_scan_main_cpu_served_vs_native", med["served"] / med["native"], "<=", 1.0,
               note=f"{1000 * med['served']:.1f} ms vs {1000 * med['native']:.1f} ms of main-thread "
                    f"CPU per redis-cli --scan of {n_keys:,} keys")

    # GET p99 while redis-cli --scan runs back to back.
    n_get = ctx.pick(100_000, 300_000)
    phases = ["baseline"] + VARIANTS
    p99 = {p: [] for p in phases}
    for r, ph in alternate(rounds, phases):
        loop = None
        if ph != "baseline":
            set_mode(srv, ph)
            loop = cli_scan_loop(srv.port, 600)
            time.sleep(0.2)
        try:
            g = next(iter(redis_benchmark(srv.port, [
                "-c", 50, "-n", n_get, "-r", n_keys // 10, "GET", "user:__rand_int__:0"]).values()))
        finally:
            if loop:
                if loop.poll() not in (None, 0):
                    raise RuntimeError("the redis-cli --scan loop failed")
                stop_loop(loop)
        p99[ph].append(g["p99"])
        log(f"  round {r + 1} {ph:8s} GET {fmt(g['rps']):>8} ops/s p50/p99 {g['p50']}/{g['p99']} ms")
    med = {p: median(p99[p]) for p in phases}
    for p in phases:
        res.record(SC, "cli_scan_bg_get_p99", med[p], "ms", variant=p)
    res.target(SC, "cli_scan_bg_get_p99_served_vs_native", med["served"] / med["native"], "<=", 1.0,
               note=f"baseline {med['baseline']} ms, native {med['native']} ms, served "
                    f"{med['served']} ms while redis-cli --scan loops")


def part_keys(ctx, srv, n_keys, rounds):
    """KEYS * with a PING loop running: its longest round trip. "baseline" is the
    PING loop alone for as long as the native KEYS took (what the machine's own
    scheduling costs: on a loaded machine it is not zero)."""
    res = ctx.results
    log(f"  -- KEYS * over {n_keys:,} keys, a PING loop measuring stalls")
    phases = ["baseline"] + VARIANTS
    stall = {p: [] for p in phases}
    took = {p: [] for p in phases}
    c = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=900)
    # The main thread's CPU for one KEYS * with nothing else running: a bound on
    # any stall it causes that the machine's own scheduling cannot blur (it
    # includes writing the reply to the socket, the same work in both variants).
    cpu = {v: [] for v in VARIANTS}
    try:
        for r, v in alternate(rounds, VARIANTS):
            set_mode(srv, v)
            c0 = main_cpu(srv)
            n = len(c.execute_command("KEYS", "*"))
            cpu[v].append(main_cpu(srv) - c0)
            if n != n_keys:
                raise RuntimeError(f"KEYS * ({v}) returned {n} keys of {n_keys}")
            log(f"  round {r + 1} {v:8s} KEYS * main thread {1000 * cpu[v][-1]:.1f} ms CPU")
    except BaseException:
        c.close()
        raise
    mc = {v: median(cpu[v]) for v in VARIANTS}
    for v in VARIANTS:
        res.record(SC, "keys_main_cpu_ms", 1000 * mc[v], "ms", variant=v)
    res.record(SC, "keys_main_cpu_served_vs_native", mc["served"] / mc["native"], "x",
               note=f"{1000 * mc['served']:.1f} ms vs {1000 * mc['native']:.1f} ms of main-thread "
                    f"CPU per KEYS * of {n_keys:,} keys (replies written to the socket included)")
    log(f"  KEYS * main-thread CPU served/native {mc['served'] / mc['native']:.3f}x "
        f"({1000 * mc['served']:.1f} ms vs {1000 * mc['native']:.1f} ms)")
    try:
        for r, ph in alternate(rounds, phases):
            if ph != "baseline":
                set_mode(srv, ph)
            probe = Probe(ctx, srv.port)
            try:
                t0 = time.time()
                if ph == "baseline":
                    time.sleep(median(took["native"]) if took["native"] else 0.5)
                    n = n_keys
                else:
                    n = len(c.execute_command("KEYS", "*"))
                dt = time.time() - t0
            finally:
                pr = probe.stop()
            if n != n_keys:
                raise RuntimeError(f"KEYS * ({ph}) returned {n} keys of {n_keys}")
            stall[ph].append(pr["max_us"] / 1000)
            took[ph].append(dt)
            log(f"  round {r + 1} {ph:8s} " + ("no KEYS   " if ph == "baseline" else
                                              f"KEYS * took {dt * 1000:.0f} ms;")
                + f" longest PING {pr['max_us'] / 1000:.2f} ms (p99 {pr['p99_us'] / 1000:.2f} ms, "
                  f"{pr['count']} PINGs)")
    finally:
        c.close()
    med = {p: median(stall[p]) for p in phases}
    for p in phases:
        res.record(SC, "keys_longest_stall_ms", med[p], "ms", variant=p)
        if p != "baseline":
            res.record(SC, "keys_reply_ms", 1000 * median(took[p]), "ms", variant=p)
    res.target(SC, "keys_longest_stall_served_ms", med["served"], "<=", 5.0, unit=" ms",
               note=f"native {med['native']:.1f} ms ({med['native'] / max(med['served'], 1e-3):.1f}x "
                    f"the served figure), served {med['served']:.2f} ms, PING loop alone "
                    f"{med['baseline']:.2f} ms; max over a run, median of {rounds} runs")


def part_delete_matched(ctx, srv, users, rounds):
    res = ctx.results
    n_keys = users * 10
    ids = ctx.tmp / "native-inval-ids.txt"
    # One line per invalidation of a loop (sclient wraps around a list at most 1,000 times).
    ids.write_text((INVAL_ID + "\n") * 1000)
    log(f"  -- delete_matched of user:{INVAL_ID}:* (10,000 keys of {n_keys:,}): SCAN MATCH COUNT "
        f"1000 + DEL")
    # 1. Both find the same keys.
    found = {}
    for v in VARIANTS:
        set_mode(srv, v)
        dump = ctx.tmp / f"native-found-{v}.txt"
        out = ctx.sclient.run(srv.port, "inval", ["--scan", "SCAN", "--ids", ids, "--nodel",
                                                  "--dump", dump])
        if out["errors"]:
            raise RuntimeError(f"{v}: {out['first_error']}")
        found[v] = {line.split()[1] for line in open(dump)}
    want = {f"user:{u:012d}:{n}" for u in range(1000) for n in range(10)}
    same = found["native"] == found["served"] == want
    res.target(SC, "delete_matched_same_keys", 1 if same else 0, ">=", 1, unit="",
               note=f"{len(found['served'])} keys served, {len(found['native'])} native, "
                    f"{len(want)} expected")

    # 2. Time per invalidation (scan + DEL, then a refill that is not timed).
    per = {"native": ctx.pick(2, 3), "served": ctx.pick(5, 10)}
    times = {v: [] for v in VARIANTS}
    for r, v in alternate(rounds, VARIANTS):
        set_mode(srv, v)
        out = ctx.sclient.run(srv.port, "inval", ["--scan", "SCAN", "--ids", ids, "--wrap",
                                                  "--refill", "--max", per[v]])
        if out["errors"] or out["keys"] != 10_000 * out["n"]:
            raise RuntimeError(f"{v}: {out['keys']} keys in {out['n']} invalidations, errors: "
                               f"{out['first_error']}")
        times[v] += out["times_us"]
        log(f"  round {r + 1} {v:7s} {out['n']} invalidations, median "
            f"{median(out['times_us']) / 1000:.1f} ms, {out['calls'] / out['n']:.0f} SCAN calls each")
    med = {v: median(times[v]) / 1000 for v in VARIANTS}
    for v in VARIANTS:
        res.record(SC, "delete_matched_ms", med[v], "ms", variant=v)
    res.target(SC, "delete_matched_speedup", med["native"] / med["served"], ">=", 1.0,
               note=f"{med['native']:.1f} ms native vs {med['served']:.1f} ms served per "
                    f"invalidation of 10,000 keys of {n_keys:,}")

    # 3. GET p99 while invalidations run back to back; "served paced" runs them at
    # the rate the native loop reached, for a comparison at equal work.
    n_get = ctx.pick(100_000, 300_000)
    phases = ["baseline"] + VARIANTS + ["served paced"]
    p99 = {p: [] for p in phases}
    native_rate = None
    for r, ph in alternate(rounds, phases):
        loop = None
        t0 = time.time()
        if ph != "baseline":
            set_mode(srv, ph.split()[0])
            opts = ["--scan", "SCAN", "--ids", ids, "--wrap", "--refill", "--seconds", 600]
            if ph.endswith("paced"):
                opts += ["--rate", f"{native_rate or 2:.3f}"]
            loop = ctx.sclient.start(srv.port, "inval", opts)
            time.sleep(0.2)
        try:
            g = next(iter(redis_benchmark(srv.port, [
                "-c", 50, "-n", n_get, "-r", users, "GET", "user:__rand_int__:0"]).values()))
        finally:
            lo = Sclient.finish(loop) if loop else None
        if lo and lo["errors"]:
            raise RuntimeError(f"{ph}: {lo['first_error']}")
        if ph == "native":
            native_rate = lo["n"] / (time.time() - t0)
        p99[ph].append(g["p99"])
        log(f"  round {r + 1} {ph:12s} GET {fmt(g['rps']):>8} ops/s p50/p99 {g['p50']}/{g['p99']} ms"
            + (f"  {lo['n']} invalidations done" if lo else ""))
    med = {p: median(p99[p]) for p in phases}
    for p in phases:
        res.record(SC, "delete_matched_bg_get_p99", med[p], "ms", variant=p)
    res.target(SC, "delete_matched_bg_get_p99_served_paced_vs_native",
               med["served paced"] / med["native"], "<=", 1.0,
               note=f"baseline {med['baseline']} ms, native {med['native']} ms, served at the "
                    f"native rate {med['served paced']} ms, served back to back {med['served']} ms "
                    f"(several times the invalidations)")
