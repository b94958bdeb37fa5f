"""Scenario 4, HSCAN (Qunar report).

a) On a big hashtable-encoded hash: the longest main-thread stall (max latency
   of a concurrent PING probe in a separate process) during a full
   SNAPSHOT.HSCAN iteration vs HGETALL vs a full native HSCAN iteration.
b) On a 2,000-field listpack hash with COUNT 100: server CPU (INFO CPU deltas,
   all threads and main thread) per full iteration of SNAPSHOT.HSCAN vs HSCAN vs
   HGETALL."""

import time

from lib import Probe, alternate, fmt, gen_hash, log, median, pipe_load

NAME = "hscan"
SC = "4-hscan"


def run(ctx):
    fields = ctx.pick(200_000, 1_000_000)
    rounds = 3
    res = ctx.results
    srv = ctx.server(module=True)
    try:
        t = pipe_load(srv, gen_hash("big", fields), expect=(fields + 999) // 1000)
        enc = srv.r.object("encoding", "big")
        assert srv.r.hlen("big") == fields, "big hash incomplete"
        log(f"  big hash: {fields:,} fields ({enc}) loaded in {t:.1f}s")

        # a) stalls
        ops = {
            "idle": None,
            "SNAPSHOT.HSCAN": ("iter", ["SNAPSHOT.HSCAN", "big", "{}", "COUNT", 1000]),
            "HSCAN": ("iter", ["HSCAN", "big", "{}", "COUNT", 1000]),
            "HGETALL": ("repeat", ["HGETALL", "big"]),
        }
        stalls = {k: [] for k in ops}
        for r, v in alternate(rounds, list(ops)):
            probe = Probe(ctx, srv.port)
            try:
                if ops[v] is None:
                    time.sleep(1.0)
                    out = None
                else:
                    mode, cmd = ops[v]
                    out = ctx.sclient.run(srv.port, mode, ["--repeat", 1], cmd)
            finally:
                p = probe.stop()
            if out is not None:
                if out["errors"] or (v != "HGETALL" and out["items"] != 2 * fields):
                    raise RuntimeError(f"{v}: {out['items']} items, errors {out['first_error']}")
            stalls[v].append(dict(max=p["max_us"] / 1000, p999=p["p999_us"] / 1000,
                                  pings=p["count"],
                                  op=(out["elapsed_us"] / 1000 if out else 1000.0),
                                  calls=(out["calls"] if out else 0)))
            log(f"  round {r + 1} {v:15s} probe max {p['max_us'] / 1000:7.2f} ms  p99.9 "
                f"{p['p999_us'] / 1000:.2f} ms  ({p['count']} PINGs)"
                + (f"  op took {out['elapsed_us'] / 1000:.1f} ms in {out['calls']} calls"
                   if out else ""))
        si = srv.snap_info()
        hold = int(si.get("hash_longest_lock_hold_us", 0)) / 1000
        med = {v: {k: median([x[k] for x in stalls[v]]) for k in stalls[v][0]} for v in stalls}
        for v in stalls:
            res.record(SC, "stall_max_ms", med[v]["max"], "ms", variant=v)
            res.record(SC, "stall_worst_ms", max(x["max"] for x in stalls[v]), "ms", variant=v)
            res.record(SC, "probe_p999_ms", med[v]["p999"], "ms", variant=v)
            res.record(SC, "op_ms", med[v]["op"], "ms", variant=v)
        res.record(SC, "hash_longest_lock_hold_ms", hold, "ms", variant="SNAPSHOT.HSCAN")
        res.target(SC, "snapshot_hscan_stall_ms", med["SNAPSHOT.HSCAN"]["max"], "<=", 5, unit=" ms",
                   note=f"median of per-round probe max; worst "
                        f"{max(x['max'] for x in stalls['SNAPSHOT.HSCAN']):.2f} ms; idle probe max "
                        f"{med['idle']['max']:.2f} ms; HGETALL {med['HGETALL']['max']:.1f} ms, "
                        f"HSCAN {med['HSCAN']['max']:.2f} ms; module's longest lock hold "
                        f"{hold:.2f} ms")

        # b) CPU per full iteration on a listpack hash
        srv.r.config_set("hash-max-listpack-entries", 4096)
        pipe_load(srv, gen_hash("small", 2000), expect=2)
        enc = srv.r.object("encoding", "small")
        log(f"  small hash: 2,000 fields ({enc})")
        if enc not in ("listpack", "ziplist"):
            raise RuntimeError(f"small hash is {enc}, expected listpack")
        iters = ctx.pick(300, 2000)
        cops = {
            "SNAPSHOT.HSCAN": ("iter", ["SNAPSHOT.HSCAN", "small", "{}", "COUNT", 100]),
            "HSCAN": ("iter", ["HSCAN", "small", "{}", "COUNT", 100]),
            "HGETALL": ("repeat", ["HGETALL", "small"]),
        }
        cpu = {k: [] for k in cops}
        for r, v in alternate(rounds, list(cops)):
            mode, cmd = cops[v]
            c0, m0 = srv.cpu()
            out = ctx.sclient.run(srv.port, mode, ["--repeat", iters], cmd)
            c1, m1 = srv.cpu()
            if out["errors"] or out["iterations"] != iters:
                raise RuntimeError(f"{v}: {out}")
            per = (c1 - c0) / iters * 1e6
            main = (m1 - m0) / iters * 1e6 if m0 is not None else None
            cpu[v].append(dict(total=per, main=main, wall=out["elapsed_us"] / iters,
                               calls=out["calls"] / iters))
            log(f"  round {r + 1} {v:15s} CPU {per:8.1f} us/iteration (main thread "
                f"{fmt(main)} us), {out['calls'] / iters:.0f} calls, client wall "
                f"{out['elapsed_us'] / iters:.0f} us/iteration")
        medc = {v: {k: median([x[k] for x in cpu[v]]) for k in cpu[v][0]} for v in cpu}
        for v in cpu:
            res.record(SC, "cpu_us_per_iteration", medc[v]["total"], "us", variant=v)
            res.record(SC, "main_cpu_us_per_iteration", medc[v]["main"], "us", variant=v)
            res.record(SC, "wall_us_per_iteration", medc[v]["wall"], "us", variant=v)
            res.record(SC, "calls_per_iteration", medc[v]["calls"], "calls", variant=v)
        h = medc["HGETALL"]["total"]
        res.target(SC, "snapshot_hscan_cpu_vs_hgetall", medc["SNAPSHOT.HSCAN"]["total"] / h, "<=", 1.0,
                   note=f"{medc['SNAPSHOT.HSCAN']['total']:.0f} vs {h:.0f} us per iteration "
                        f"(main thread {fmt(medc['SNAPSHOT.HSCAN']['main'])} vs "
                        f"{fmt(medc['HGETALL']['main'])} us); native HSCAN "
                        f"{medc['HSCAN']['total'] / h:.2f}x HGETALL")
    finally:
        srv.stop()
