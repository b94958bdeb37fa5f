"""Scenario 5, memory: index bytes per key beyond the key's own bytes. Two
servers, one with the module and one without, hold the same data; the
difference of their used_memory (and RSS) growth divided by the key count is
what the index costs. The module allocates through the server's allocator,
so its memory is part of used_memory."""

import random

from lib import gen_strings, log, mem_available_kb, pipe_load


def gen_shuffled(n, chunk=50000):
    """SET key:<i> value for i in [0, n) in a random order."""
    order = list(range(n))
    random.Random(7).shuffle(order)
    for start in range(0, n, chunk):
        parts = []
        for i in order[start:start + chunk]:
            k = f"key:{i}"
            parts.append(f"*3\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n$5\r\nvalue\r\n")
        yield "".join(parts).encode()

NAME = "memory"
SC = "5-memory"


def mean_key_len(n):
    """Mean length of key:0 .. key:<n-1> (every way of loading uses these)."""
    total, digits, lo = 0, 1, 0
    while lo < n:
        hi = min(n, 10 ** digits)
        total += (hi - lo) * (4 + digits)
        lo, digits = hi, digits + 1
    return total / n


def measure(ctx, n, how):
    a = ctx.server(module=True)
    b = ctx.server(module=False)
    try:
        base = {s: (s.used_memory(), s.rss()) for s in (a, b)}
        for s in (a, b):
            if how == "populate":
                s.populate(n)
            elif how == "pipe-random":
                pipe_load(s, gen_shuffled(n), expect=n)
            else:
                pipe_load(s, gen_strings(n, fmt="key:%d", value="value"), expect=n)
                if s.module:
                    s.wait_index()
        after = {s: (s.used_memory(), s.rss()) for s in (a, b)}
        si = a.snap_info()
        if int(si["index_keys"]) != n:
            raise RuntimeError(f"index_keys {si['index_keys']} != {n}")
        d_used = ((after[a][0] - base[a][0]) - (after[b][0] - base[b][0])) / n
        d_rss = ((after[a][1] - base[a][1]) - (after[b][1] - base[b][1])) / n
        plain_per_key = (after[b][0] - base[b][0]) / n
        return d_used, d_rss, int(si["index_bytes_per_key"]), plain_per_key
    finally:
        a.stop()
        b.stop()


def run(ctx):
    res = ctx.results
    sizes = [1_000_000]
    if not ctx.quick:
        need_kb = 10_000_000 * 400 // 1024  # two servers, generous
        if mem_available_kb() > need_kb:
            sizes.append(10_000_000)
        else:
            log(f"  skipping 10M keys: MemAvailable {mem_available_kb() // 1024} MiB < "
                f"{need_kb // 1024} MiB")
    # The insertion order shapes the B+tree: DEBUG POPULATE and an ascending
    # SET stream create key:0, key:1, ... (long ascending runs in byte order),
    # a shuffled SET stream inserts at random places.
    ways = ["populate", "pipe-random"] if ctx.quick else ["populate", "pipe-random", "pipe"]
    results = {}
    for n in sizes:
        for how in ways:
            if how.startswith("pipe") and n > 1_000_000:
                continue
            d_used, d_rss, est, plain = measure(ctx, n, how)
            label = f"{n // 1_000_000}M keys, " + {
                "populate": "DEBUG POPULATE (key:0, key:1, ...)",
                "pipe": "SET via --pipe, ascending key:0, key:1, ...",
                "pipe-random": "SET via --pipe, random order"}[how]
            log(f"  {label}: used_memory delta {d_used:.1f} B/key, RSS delta {d_rss:.1f} B/key, "
                f"INFO index_bytes_per_key {est} (the server itself: {plain:.0f} B/key)")
            res.record(SC, "used_memory_delta_per_key", d_used, "bytes/key", variant=label)
            res.record(SC, "rss_delta_per_key", d_rss, "bytes/key", variant=label)
            res.record(SC, "index_bytes_per_key_info", est, "bytes/key", variant=label)
            res.record(SC, "server_bytes_per_key", plain, "bytes/key", variant=label)
            res.record(SC, "used_memory_delta_beyond_key_bytes", d_used - mean_key_len(n),
                       "bytes/key", variant=label)
            results[(n, how)] = (d_used, d_rss, est)
    # The target counts what the index costs beyond the key's own bytes,
    # which any index of the keys has to hold.
    for (n, how), (d_used, d_rss, est) in results.items():
        kl = mean_key_len(n)
        res.target(SC, f"index_bytes_per_key {n // 1_000_000}M {how}", d_used - kl, "<=", 48,
                   unit=" B",
                   note=f"used_memory delta {d_used:.1f} B/key minus the mean key length {kl:.1f} B; "
                        f"RSS delta {d_rss - kl:.1f} B beyond the key; INFO estimate {est} B")
