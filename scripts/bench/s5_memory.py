"""Scenario 5, memory (issue 9): what the index costs per key, key bytes
included, for three key shapes at 1M keys (10M for the first in full runs):

- seq: `key:%012d` (16 bytes) loaded in ascending order;
- user: `user:<id>:item:<n>` (24 bytes) loaded in random order: 100,000 user
  ids drawn uniformly without replacement from [0, 10^12) and printed with 12
  digits (so neighbouring ids share only their first few digits, as real ids
  do), n = 0..9 for each (1M keys), the 1M keys shuffled;
- uuid: random 36-byte UUID-like keys (8-4-4-4-12 lowercase hex of 128 random
  bits), random order;
- seq+expiry: the seq keys, each SET with EX 100000 (keys with an expiry may
  pay for it; the difference from seq is shown).

Each shape is loaded into a server with snapscan and one without (same data,
values of 8 bytes). Measured: INFO snapshot_index_memory_bytes / index_keys
(the module's allocator, hash copies excluded), snapshot_index_bytes_per_key,
and the RSS and used_memory growth of the module's server minus the plain
server's, per key. Targets (INFO figure): seq <= 16 B, user <= 24 B, uuid
<= key length + 12 = 48 B.
"""

import random
import time

from lib import log, mem_available_kb, pipe_load

NAME = "memory"
SC = "5-memory"
VALUE = "v" * 8


def resp_set_chunks(keys, extra=(), chunk=50000):
    tail = "".join(f"${len(str(a))}\r\n{a}\r\n" for a in extra)
    head = f"*{3 + len(extra)}\r\n$3\r\nSET\r\n"
    v = f"${len(VALUE)}\r\n{VALUE}\r\n"
    out = []
    for start in range(0, len(keys), chunk):
        out.append("".join(f"{head}${len(k)}\r\n{k}\r\n{v}{tail}"
                           for k in keys[start:start + chunk]).encode())
    return out


def user_keys(n):
    users = n // 10
    rng = random.Random(11)
    ids = rng.sample(range(10 ** 12), users)
    keys = [f"user:{u:012d}:item:{i}" for u in ids for i in range(10)]
    rng.shuffle(keys)
    return keys


def uuid_keys(n):
    rng = random.Random(13)
    out = []
    for _ in range(n):
        h = f"{rng.getrandbits(128):032x}"
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


SHAPES = {  # name: (description, target bytes/key or None)
    "seq": ("key:%012d, ascending", 16),
    "user": ("user:<12 digits>:item:<n>, random order", 24),
    "uuid": ("36-byte UUID-like, random order", 36 + 12),
    "seq+expiry": ("key:%012d, ascending, EX 100000", None),
}


def settle_heap(s, timeout=15):
    """Waits (bounded) until the module's heap stops moving (the log drained)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        h = int(s.snap_info()["module_heap_bytes"])
        if last is not None and abs(h - last) <= max(4096, last // 1000):
            return
        last = h
        time.sleep(0.3)


def measure(ctx, shape, n):
    a = ctx.server(module=True)
    b = ctx.server(module=False)
    try:
        base = {s: (s.used_memory(), s.rss()) for s in (a, b)}
        if shape.startswith("seq"):
            extra = ["EX", 100000] if shape == "seq+expiry" else []
            for s in (a, b):
                done, _ = ctx.sclient.write(s.port, ["SET", "key:{k}", VALUE] + extra, n, seed=0,
                                            depth=64, conns=2, seconds=1200)
                if done != n:
                    raise RuntimeError(f"loaded {done} of {n} keys")
            key_len = 16.0
        else:
            keys = user_keys(n) if shape == "user" else uuid_keys(n)
            key_len = sum(len(k) for k in keys) / len(keys)
            chunks = resp_set_chunks(keys)
            del keys
            for s in (a, b):
                pipe_load(s, chunks, expect=n)
            del chunks
        a.wait_index()
        settle_heap(a)
        after = {s: (s.used_memory(), s.rss()) for s in (a, b)}
        si = a.snap_info()
        if int(si["index_keys"]) != n:
            raise RuntimeError(f"index_keys {si['index_keys']} != {n}")
        return dict(
            info=int(si["index_memory_bytes"]) / n,
            info_field=int(si["index_bytes_per_key"]),
            heap=int(si["module_heap_bytes"]) / n,
            used=((after[a][0] - base[a][0]) - (after[b][0] - base[b][0])) / n,
            rss=((after[a][1] - base[a][1]) - (after[b][1] - base[b][1])) / n,
            server=(after[b][0] - base[b][0]) / n,
            key_len=key_len)
    finally:
        a.stop()
        b.stop()


def run(ctx):
    res = ctx.results
    runs = [(shape, 1_000_000) for shape in SHAPES]
    if not ctx.quick:
        need_kb = 10_000_000 * 400 // 1024  # two servers, generous
        if mem_available_kb() > need_kb:
            runs.append(("seq", 10_000_000))
        else:
            log(f"  skipping 10M keys: MemAvailable {mem_available_kb() // 1024} MiB < "
                f"{need_kb // 1024} MiB")
    got = {}
    for shape, n in runs:
        m = measure(ctx, shape, n)
        got[(shape, n)] = m
        label = f"{n // 1_000_000}M {shape}"
        log(f"  {label}: INFO {m['info']:.1f} B/key, RSS delta {m['rss']:.1f}, used_memory delta "
            f"{m['used']:.1f} (server itself {m['server']:.0f} B/key)")
        for k, unit in [("info", "bytes/key"), ("info_field", "bytes/key"), ("heap", "bytes/key"),
                        ("used", "bytes/key"), ("rss", "bytes/key"), ("server", "bytes/key"),
                        ("key_len", "bytes")]:
            res.record(SC, {"info": "index_memory_bytes_per_key",
                            "info_field": "index_bytes_per_key_info",
                            "heap": "module_heap_bytes_per_key",
                            "used": "used_memory_delta_per_key",
                            "rss": "rss_delta_per_key",
                            "server": "server_bytes_per_key",
                            "key_len": "mean_key_length"}[k], m[k], unit, variant=label)
    log(f"\n  bytes per key, key bytes included (module server minus plain server for the deltas):")
    log(f"  {'keys':18s} {'key len':>7s} {'INFO':>6s} {'RSS d':>6s} {'used d':>6s} {'server':>6s} "
        f"{'target':>7s}  status")
    for (shape, n), m in got.items():
        th = SHAPES[shape][1]
        status = "-"
        if th is not None:
            status = res.target(SC, f"index bytes/key {n // 1_000_000}M {shape}", m["info"], "<=",
                                th, unit=" B", quiet=True,
                                note=f"{SHAPES[shape][0]}; RSS delta {m['rss']:.1f} B, used_memory "
                                     f"delta {m['used']:.1f} B, key length {m['key_len']:.0f} B")
        log(f"  {n // 1_000_000}M {shape:15s} {m['key_len']:7.1f} {m['info']:6.1f} {m['rss']:6.1f} "
            f"{m['used']:6.1f} {m['server']:6.1f} {('<= ' + str(th)) if th else '':>7s}  {status}")
    if ("seq", 1_000_000) in got and ("seq+expiry", 1_000_000) in got:
        d = got[("seq+expiry", 1_000_000)]["info"] - got[("seq", 1_000_000)]["info"]
        res.record(SC, "expiry_extra_bytes_per_key", d, "bytes/key", variant="1M seq")
        log(f"  an expiry costs {d:+.1f} B/key in the index (seq+expiry minus seq)")
