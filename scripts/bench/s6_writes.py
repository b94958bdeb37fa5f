"""Scenario 6, write overhead: pipelined (-P 16) SET/HSET/DEL/EXPIRE throughput
on a server with the module loaded vs one without (A B A B ...)."""

from lib import fmt, gen_strings, log, median, pipe_load, rb_one

NAME = "writes"
SC = "6-writes"


def run(ctx):
    n_keys = ctx.pick(200_000, 1_000_000)
    n_req = ctx.pick(200_000, 1_000_000)
    rounds = ctx.pick(2, 3)
    res = ctx.results
    a = ctx.server(module=True)
    b = ctx.server(module=False)
    try:
        for s in (a, b):
            pipe_load(s, gen_strings(n_keys), expect=n_keys)
        a.wait_index()
        log(f"  both servers hold {n_keys:,} keys key:%012d")
        # In each round SET runs first, so DEL finds keys again.
        tests = {
            "SET (overwrite)": ["-t", "set", "-d", 16],
            "SET (new keys)": ["SET", "new:__rand_int__", "x" * 16],
            "HSET": ["-t", "hset", "-d", 16],
            "EXPIRE": ["EXPIRE", "key:__rand_int__", 100000],
            "DEL": ["DEL", "key:__rand_int__"],
        }
        rps = {(t, s.label): [] for t in tests for s in (a, b)}
        for r in range(rounds):
            for t, args in tests.items():
                rr = 1_000_000_000 if t == "SET (new keys)" else n_keys
                for s in (a, b):
                    st = rb_one(s.port, ["-P", 16, "-c", 50, "-n", n_req, "-r", rr] + args)
                    rps[(t, s.label)].append(st["rps"])
                log(f"  round {r + 1} {t:16s} module {fmt(rps[(t, 'module')][-1]):>9} ops/s, "
                    f"plain {fmt(rps[(t, 'plain')][-1]):>9} ops/s -> "
                    f"{rps[(t, 'module')][-1] / rps[(t, 'plain')][-1]:.3f}")
        for t in tests:
            m, p = median(rps[(t, "module")]), median(rps[(t, "plain")])
            res.record(SC, "ops_per_s", m, "ops/s", variant=f"{t} module")
            res.record(SC, "ops_per_s", p, "ops/s", variant=f"{t} plain")
            res.target(SC, f"write_ratio {t}", m / p, ">=", 0.90,
                       note=f"{fmt(m)} vs {fmt(p)} ops/s")
    finally:
        a.stop()
        b.stop()
