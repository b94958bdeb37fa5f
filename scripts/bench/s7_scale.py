"""Scenario 7, scale: build the index over many keys; check index_keys == DBSIZE;
time the index build through RDB load (DEBUG RELOAD with the module vs without)
and through MODULE LOAD backfill on a populated server, with the longest
main-thread stall during the backfill (PING probe and the module's own
snapshot_backfill_longest_lock_hold_us)."""

import time

from lib import MODULE, Probe, alternate, log, median

NAME = "scale"
SC = "7-scale"


def run(ctx):
    n = ctx.pick(1_000_000, 10_000_000)
    rounds = ctx.pick(2, 2)
    res = ctx.results
    a = ctx.server(module=True)
    b = ctx.server(module=False)
    try:
        # DEBUG POPULATE creates keys without keyspace notifications (except NEW on
        # servers that have it); the module indexes them inline or rebuilds in
        # the background: time the command on both servers, then the wait.
        pops = {}
        for s in (b, a):
            t0 = time.time()
            s.r.execute_command("DEBUG", "POPULATE", n)
            pops[s.label] = time.time() - t0
        t_idx = a.wait_index(1800)
        res.record(SC, "debug_populate_s", pops["module"], "s", variant="module")
        res.record(SC, "debug_populate_s", pops["plain"], "s", variant="plain")
        res.record(SC, "index_ready_after_populate_s", t_idx, "s", variant=f"{n:,} keys")
        log(f"  DEBUG POPULATE {n:,}: {pops['module']:.2f}s with the module, {pops['plain']:.2f}s "
            f"without; index complete {t_idx:.2f}s after the command returned")
        ok = int(a.snap_info()["index_keys"]) == a.r.dbsize() == n
        res.target(SC, "index_keys_equals_dbsize", 1 if ok else 0, ">=", 1, unit="",
                   note=f"{a.snap_info()['index_keys']} vs {a.r.dbsize()}")

        times = {"module": [], "plain": []}
        for r, s in alternate(rounds, [a, b]):
            t0 = time.time()
            s.r.execute_command("DEBUG", "RELOAD")
            if s.module:
                s.wait_index(1800)
            dt = time.time() - t0
            times[s.label].append(dt)
            log(f"  round {r + 1} DEBUG RELOAD ({s.label}): {dt:.2f}s")
        ok = int(a.snap_info()["index_keys"]) == a.r.dbsize() == n
        res.target(SC, "index_keys_equals_dbsize_after_reload", 1 if ok else 0, ">=", 1, unit="",
                   note=f"{a.snap_info()['index_keys']} vs {a.r.dbsize()}")
        tm, tp = median(times["module"]), median(times["plain"])
        res.record(SC, "debug_reload_s", tm, "s", variant="module")
        res.record(SC, "debug_reload_s", tp, "s", variant="plain")
        res.record(SC, "rdb_load_index_overhead_s", tm - tp, "s")
        log(f"  DEBUG RELOAD (save + load): {tm:.2f}s with the module, {tp:.2f}s without "
            f"(+{tm - tp:.2f}s = {(tm / tp - 1) * 100:.0f}% for indexing during load)")
        a.stop()

        # MODULE LOAD on the populated server without the module.
        probe = Probe(ctx, b.port)
        time.sleep(1.0)
        idle = probe.stop()
        probe = Probe(ctx, b.port)
        try:
            t0 = time.time()
            b.r.execute_command("MODULE", "LOAD", str(MODULE))
            b.module = True
            t_load = time.time() - t0
            deadline = time.time() + 1800
            while time.time() < deadline:
                si = b.snap_info()
                # Done when the walk has ended and the indexer has applied it.
                if int(si.get("backfill_in_progress", 1)) == 0 and \
                        int(si.get("index_backlog", 1)) == 0:
                    break
                time.sleep(0.05)
            t_bf = time.time() - t0
        finally:
            p = probe.stop()
        si = b.snap_info()
        hold = int(si["backfill_longest_lock_hold_us"]) / 1000
        ok = int(si["index_keys"]) == b.r.dbsize() == n
        log(f"  MODULE LOAD took {t_load * 1000:.1f} ms; backfill done after {t_bf:.2f}s "
            f"({n / t_bf:,.0f} keys/s); probe max {p['max_us'] / 1000:.2f} ms, p99.9 "
            f"{p['p999_us'] / 1000:.2f} ms ({p['count']} PINGs; idle probe max "
            f"{idle['max_us'] / 1000:.2f} ms); module's longest lock hold {hold:.2f} ms")
        res.record(SC, "backfill_s", t_bf, "s", variant=f"{n:,} keys")
        res.record(SC, "module_load_ms", t_load * 1000, "ms")
        res.record(SC, "backfill_probe_max_ms", p["max_us"] / 1000, "ms")
        res.record(SC, "backfill_probe_p999_ms", p["p999_us"] / 1000, "ms")
        res.record(SC, "idle_probe_max_ms", idle["max_us"] / 1000, "ms")
        res.target(SC, "index_keys_equals_dbsize_after_backfill", 1 if ok else 0, ">=", 1, unit="",
                   note=f"{si['index_keys']} vs {b.r.dbsize()}")
        res.target(SC, "backfill_stall_probe_ms", p["max_us"] / 1000, "<=", 5, unit=" ms",
                   note=f"PING probe max during backfill; idle probe max "
                        f"{idle['max_us'] / 1000:.2f} ms; p99.9 {p['p999_us'] / 1000:.2f} ms")
        res.target(SC, "backfill_longest_lock_hold_ms", hold, "<=", 5, unit=" ms",
                   note="INFO snapshot_backfill_longest_lock_hold_us")
    finally:
        a.stop()
        b.stop()
