"""Scenario 6, write cost (issue 9): server CPU per write with four arms on the
same server binary, each a server of its own holding the same keys:

- none: no module;
- noop: a no-op subscriber (scripts/bench/noop_module.c, compiled here): the
  same keyspace events (NOTIFY_ALL | LOADED | NEW) and server events (FlushDB,
  SwapDB, Loading) as snapscan, callbacks that return at once;
- snapscan: target/release/libsnapscan.so (or SNAPSCAN_MODULE);
- idle: the same with `snapshot.index-idle-timeout 1`, measured after its index
  was dropped for want of scans (informative: what an operator who scans rarely
  pays between scans).

Workloads (sclient write mode, 4 connections, pipelined 16 deep; keys are a
seeded permutation, the same on every arm, so every SET of a new key creates
one and every EXPIRE / DEL hits):

- SET existing: SET key:<12 digits> over the loaded keys (random order);
- SET EX existing: SET key:<12 digits> v EX <ttl> over the loaded keys, the
  cache's write: every one changes the key's expiry (the TTL alternates between
  two values from round to round, so the index changes on every round);
- SET new: SET n<rep>:<12 digits>, keys that never existed;
- SET EX new: SET e<rep>:<12 digits> v EX 3600, keys that never existed (deleted
  again, unmeasured, at the end of the round);
- HSET: HSET myhash field:<12 digits> (one hash, as redis-benchmark -t hset);
- EXPIRE: EXPIRE n<rep>:<12 digits> 100000 on the keys SET new created;
- DEL: DEL of those keys (the dataset returns to its size every round).

Server CPU = sum over the server's threads of the time on a CPU
(/proc/<pid>/task/*/schedstat, ns; utime+stime of .../stat, clock ticks, is
recorded as a cross-check), read before the load and after it, once the
snapscan indexer has applied everything (index_backlog 0). Reported for all
threads, the main thread (tid == pid) and snapscan's threads by name. Each
figure is the median of 3 rounds (SNAPSCAN_BENCH_ROUNDS=N for more). In a
round, each workload runs in 6 slices per arm, the arms interleaved slice by
slice in a rotating order; a round's figure is the sum of its slices' CPU over
the sum of their operations.
"""

import os

from lib import fmt, log, median, mem_available_kb, noop_module

NAME = "writes"
SC = "6-writes"
VALUE = "x" * 16
SLICES = 6  # slices per arm and workload in a round, interleaved across the arms
ARMS = ["none", "noop", "snapscan", "idle"]
# "idle": snapscan with `snapshot.index-idle-timeout 1` (set once its keys are
# loaded and indexed), measured once its index was dropped for want of scans
# (README, "Dropping the index while nobody scans").
WORKLOADS = ["SET existing", "SET EX existing", "SET new", "SET EX new", "HSET", "EXPIRE", "DEL"]
# Writes that leave the index as it is (same type, no expiry change): their
# all-threads target is the tighter one.
UNCHANGED = {"SET existing", "HSET"}
TARGETS = [  # (metric, arm ratio, thread group, threshold, workloads or None for all)
    ("snapscan/noop all threads", ("snapscan", "noop"), "all", 1.15, UNCHANGED),
    ("snapscan/noop all threads", ("snapscan", "noop"), "all", 1.3,
     set(WORKLOADS) - UNCHANGED),
    ("snapscan/none all threads", ("snapscan", "none"), "all", 1.35, None),
    ("snapscan/noop main thread", ("snapscan", "noop"), "main", 1.10, None),
]


def workload(name, rnd, n_keys, n_req):
    """(command, range) of a workload in round rnd."""
    return {
        "SET existing": (["SET", "key:{k}", VALUE], n_keys),
        "SET EX existing": (["SET", "key:{k}", VALUE, "EX", 3600 + rnd % 2], n_keys),
        "SET new": (["SET", f"n{rnd}:{{k}}", VALUE], n_req),
        "SET EX new": (["SET", f"e{rnd}:{{k}}", VALUE, "EX", 3600], n_req),
        "HSET": (["HSET", "myhash", "field:{k}", VALUE], n_req),
        "EXPIRE": (["EXPIRE", f"n{rnd}:{{k}}", 100000], n_req),
        "DEL": (["DEL", f"n{rnd}:{{k}}"], n_req),
    }[name]


def ratio(per, w, x, y, g):
    """Median over the rounds of arm x's figure over arm y's (the arms of a round
    ran interleaved, so a round's ratio is paired), and the rounds' ratios."""
    each = [a[g] / b[g] for a, b in zip(per[(w, x)], per[(w, y)]) if b.get(g)]
    return median(each), each


def thread_label(comm):
    """snapscan-indexe (comm is cut at 15 bytes) -> indexer."""
    short = comm.replace("snapscan-", "")
    return {"indexe": "indexer", "janito": "janitor"}.get(short, short)


def settle(s, timeout=120):
    """Waits until snapscan's indexer has applied every write (other arms: at once)."""
    if not s.module:
        return
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        if int(s.snap_info().get("index_backlog", 0)) == 0:
            return
        time.sleep(0.01)
    raise RuntimeError(f"index_backlog not 0 after {timeout}s")


def cpu_delta(before, after):
    """{group: seconds}: all, main, stat_all (ticks), and every non-main thread name."""
    out = {"all": 0.0, "stat_all": 0.0}
    for tid, (name, stat1, run1) in after.items():
        _, stat0, run0 = before.get(tid, (name, 0.0, 0.0))
        d = run1 - run0
        out["all"] += d
        out["stat_all"] += stat1 - stat0
        out[name] = out.get(name, 0.0) + d
    return out


def load(ctx, s, n_keys):
    n, t = ctx.sclient.write(s.port, ["SET", "key:{k}", VALUE], n_keys, seed=0, depth=64,
                             conns=2, seconds=1200)
    if n != n_keys:
        raise RuntimeError(f"loaded {n} of {n_keys} keys")
    if s.module:
        s.wait_index(900)
    if s.label == "idle":
        import time
        s.r.execute_command("CONFIG", "SET", "snapshot.index-idle-timeout", "1")
        deadline = time.time() + 120
        while int(s.snap_info().get("index_dropped", 0)) != 1:
            if time.time() > deadline:
                raise RuntimeError("idle arm: the index was not dropped within 120 s")
            time.sleep(0.1)
    return t


def measure_size(ctx, n_keys, n_req, rounds, noop):
    res = ctx.results
    servers = {
        "none": ctx.server(module=False, label="none"),
        "noop": ctx.server(module=False, load=noop, label="noop"),
        "snapscan": ctx.server(module=True, label="snapscan"),
        "idle": ctx.server(module=True, label="idle"),
    }
    size = f"{n_keys // 1_000_000}M"
    try:
        for arm, s in servers.items():
            t = load(ctx, s, n_keys)
            log(f"  {arm}: loaded {n_keys:,} keys key:%012d in {t:.1f}s")
        # per (workload, arm): list of {group: us per op}, ops/s
        per = {(w, a): [] for w in WORKLOADS for a in ARMS}
        for rnd in range(rounds):
            for wi, w in enumerate(WORKLOADS):
                cmd, rng = workload(w, rnd, n_keys, n_req)
                seed = 1000 * (rnd + 1) + wi + 1
                # SLICES slices per arm, interleaved A B C B C A ..., so that a burst of
                # load from elsewhere on the machine hits every arm alike.
                acc = {arm: {} for arm in ARMS}
                ops = {arm: 0 for arm in ARMS}
                wall = {arm: 0.0 for arm in ARMS}
                step = -(-n_req // SLICES)
                for j in range(SLICES):
                    first = j * step
                    count = min(step, n_req - first)
                    k = (rnd + j) % len(ARMS)
                    for arm in ARMS[k:] + ARMS[:k]:
                        s = servers[arm]
                        b = s.task_cpu()
                        n, t = ctx.sclient.write(s.port, cmd, count, first=first, range_=rng,
                                                 seed=seed, depth=16, conns=4, seconds=300)
                        settle(s)
                        a = s.task_cpu()
                        if n != count:
                            raise RuntimeError(f"{arm} {w}: {n} of {count} commands done")
                        for g, v in cpu_delta(b, a).items():
                            acc[arm][g] = acc[arm].get(g, 0.0) + v
                        ops[arm] += n
                        wall[arm] += t
                for arm in ARMS:
                    us = {g: v * 1e6 / ops[arm] for g, v in acc[arm].items()}
                    us["ops_per_s"] = ops[arm] / wall[arm]
                    per[(w, arm)].append(us)
            # Unmeasured: the keys SET EX new created go, so every round starts
            # from the same dataset.
            for s in servers.values():
                n, _ = ctx.sclient.write(s.port, ["DEL", f"e{rnd}:{{k}}"], n_req, range_=n_req,
                                         seed=0, depth=64, conns=2, seconds=300)
                if n != n_req:
                    raise RuntimeError(f"{s.label}: cleanup deleted {n} of {n_req} keys")
                settle(s)
            log(f"  round {rnd + 1}/{rounds} done: " + ", ".join(
                f"{w} {'/'.join(fmt(per[(w, a)][-1]['all']) for a in ARMS)}" for w in WORKLOADS)
                + " us/op (none/noop/snapscan)")
        med = {}
        for (w, arm), xs in per.items():
            groups = set().union(*xs)
            med[(w, arm)] = {g: median([x.get(g, 0.0) for x in xs]) for g in groups}
            for g, v in sorted(med[(w, arm)].items()):
                if g == "ops_per_s":
                    res.record(SC, "ops_per_s", v, "ops/s", variant=f"{size} {w} {arm}")
                else:
                    res.record(SC, "cpu_us_per_op", v, "us", variant=f"{size} {w} {arm} {g}")
        # the table
        log(f"\n  {size} keys, {n_req:,} ops per arm, workload and round, server CPU us/op, median "
            f"of {rounds} rounds (all threads / main thread); ratios: median of the rounds' ratios:")
        log(f"  {'workload':15s} {'no module':>11s} {'no-op':>11s} {'snapscan':>11s}  "
            f"{'snapscan threads':24s} {'snap/no-op':>10s} {'snap/none':>10s} {'main s/n-o':>10s}")
        log(f"  {'':15s} {'':>11s} {'':>11s} {'':>11s}  {'':24s} {'<=1.15/1.3':>10s} "
            f"{'<= 1.35':>10s} {'<= 1.10':>10s}")
        for w in WORKLOADS:
            cells = [f"{med[(w, a)]['all']:.2f}/{med[(w, a)]['main']:.2f}" for a in ARMS[:3]]
            sm = med[(w, "snapscan")]
            thr = " ".join(f"{thread_label(g)} {v:.2f}" for g, v in sorted(sm.items())
                           if g.startswith("snapscan") and v >= 0.005)
            rs = []
            for metric, (x, y), g, th, only in TARGETS:
                if only is not None and w not in only:
                    continue
                v, each = ratio(per, w, x, y, g)
                st = res.target(SC, f"{size} {w}: {metric}", v, "<=", th, quiet=True,
                                note=f"median of the rounds' ratios "
                                     f"{' '.join(f'{e:.3f}' for e in each)}; medians "
                                     f"{med[(w, x)][g]:.3f} vs {med[(w, y)][g]:.3f} us/op")
                rs.append(f"{v:.2f} {st}")
            log(f"  {w:15s} {cells[0]:>11s} {cells[1]:>11s} {cells[2]:>11s}  {thr or '-':24s} "
                f"{rs[0]:>10s} {rs[1]:>10s} {rs[2]:>10s}")
        tp = ", ".join(f"{w} {med[(w, 'snapscan')]['ops_per_s'] / med[(w, 'none')]['ops_per_s']:.2f}"
                       for w in WORKLOADS)
        log(f"  throughput snapscan/none (client side, informative): {tp}")
        idle = ", ".join(f"{w} {ratio(per, w, 'idle', 'noop', 'all')[0]:.2f}/"
                         f"{ratio(per, w, 'idle', 'noop', 'main')[0]:.2f}" for w in WORKLOADS)
        log(f"  index dropped while nobody scans (index-idle-timeout), snapscan/no-op all/main "
            f"threads: {idle}")
        for w in WORKLOADS:
            for g in ("all", "main"):
                res.record(SC, f"idle_over_noop_{g}_threads", ratio(per, w, "idle", "noop", g)[0],
                           "x", variant=f"{size} {w}")
        np = ", ".join(f"{w} {ratio(per, w, 'noop', 'none', 'all')[0]:.2f}" for w in WORKLOADS)
        log(f"  no-op/none all threads (the floor): {np}")
        for w in WORKLOADS:
            res.record(SC, "noop_over_none_all_threads", ratio(per, w, "noop", "none", "all")[0],
                       "x", variant=f"{size} {w}")
    finally:
        for s in servers.values():
            s.stop()


def run(ctx):
    noop = noop_module(ctx.tmp)
    sizes = [(1_000_000, ctx.pick(300_000, 1_000_000))]
    if not ctx.quick:
        need_kb = len(ARMS) * 10_000_000 * 250 // 1024  # one server per arm, generous
        if mem_available_kb() > need_kb:
            sizes.append((10_000_000, 1_000_000))
        else:
            log(f"  skipping 10M keys: MemAvailable {mem_available_kb() // 1024} MiB < "
                f"{need_kb // 1024} MiB")
    rounds = max(1, min(20, int(os.environ.get("SNAPSCAN_BENCH_ROUNDS", "3"))))
    for n_keys, n_req in sizes:
        measure_size(ctx, n_keys, n_req, rounds, noop)
