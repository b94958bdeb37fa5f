"""Scenario 12, iterations survive write load (issue 25): do whole iterations
complete, without duplicates and within bounded memory, while the keyspace
changes under them?

N keys key:%012d (loaded by sclient's write mode, SET key:{k} v, not DEBUG
POPULATE: sclient's "{k}" is always 12 zero-padded digits, so the write load
can only hit existing keys if they are named that way). A write load paced at
RATE writes/s (env SNAPSCAN_SURVIVAL_RATE, default 20,000) by three paced
sclient processes, one per command kind, RATE/3 each (sclient's write mode
sends one command template):
  - SET key:<random> v        over the existing keys (a plain SET over an
                              existing string does not change the index; it
                              recreates keys the DEL stream removed),
  - DEL key:<random>          (a permutation of [0, N): each hits once, until
                              it wraps),
  - SET newkey:<i> v EX 600   new keys (as many as the DELs remove).
Meanwhile, all started together, each on its own connection and thread:
  - F = 16 fast iterations: SNAPSHOT.SCAN <cursor> COUNT 100 from 0 to 0, back
    to back;
  - 1 slow iteration: the same with a 2 ms sleep between calls;
  - 1 served native iteration, as `redis-cli --scan` does it: SCAN <cursor>
    COUNT 10 to cursor 0, with CONFIG SET snapshot.serve-native all.
For each: completed (cursor 0 reached), ended (an error reply: SNAPSHOT.SCAN
answers one containing "ended" when the module ended the iteration to bound
its memory), unfinished (the deadline passed first), calls, keys returned,
duplicates (keys returned more than once within the iteration; one byte per
possible key, so 10M keys cost 10 MB per iteration, not a set of strings) and
duration. A sampler polls INFO snapshot every 0.1 s for the peaks of
snapshot_module_heap_bytes and snapshot_retained_bytes (a field the server
does not have is reported missing, never read as 0), against the index's size
(snapshot_index_memory_bytes) before the load.

Goal: every iteration completes, no duplicates, and the module's heap within
twice the index in every INFO sample: the largest live index since the oldest
open iteration began (snapshot_retained_index_peak_bytes, the base of the
README's memory bound), read in the same call. The peak heap over the index
before the load is reported beside it: it also counts, as if they were old
versions, the keys the load creates (with a TTL, and the filter's growth for
them). Sizes: 1M and, if not --quick and memory allows, 10M keys (--quick:
200k; env SNAPSCAN_SURVIVAL_KEYS=1000000,... chooses). SNAPSCAN_SURVIVAL_SEARCH=1 then repeats the first size (1M; --quick:
200k) at 1k, 2k, 5k, 10k, 20k and 50k writes/s and reports the largest rate at
which every iteration completed.

The scanners are Python (a small RESP reader of its own, cheaper than
redis-py's parser) and share the GIL, the write load and the server on this
machine's cores: durations are those of this client, not of the server alone.
Every loop is bounded by a deadline; an iteration still open then is reported
as unfinished.
"""

import os
import socket
import threading
import time

import redis

from lib import InfoSampler, Sclient, fmt, log, mem_available_kb, median

NAME = "survival"
SC = "12-survival"
FAST = 16
SLOW_SLEEP_S = 0.002
VALUE = "x" * 16
SEARCH_RATES = [1000, 2000, 5000, 10000, 20000, 50000]
KINDS = ["fast", "slow", "native"]
# INFO snapshot fields the sampler keeps the peak of (without the snapshot_ prefix).
PEAK_FIELDS = ["module_heap_bytes", "retained_bytes", "retained_versions", "index_memory_bytes",
               "history_entries", "history_in_place", "history_bytes", "retained_index_peak_bytes"]


def rate_from_env():
    v = os.environ.get("SNAPSCAN_SURVIVAL_RATE", "").strip()
    if not v:
        return 20_000
    try:
        r = int(float(v))
    except ValueError:
        raise RuntimeError(f"SNAPSCAN_SURVIVAL_RATE={v!r} is not a number")
    if r < 3:
        raise RuntimeError(f"SNAPSCAN_SURVIVAL_RATE={r}: needs at least 3 (one per command kind)")
    return r


class RespError(Exception):
    pass


class Resp:
    """A minimal RESP2 connection for SCAN-shaped replies: the scanners must
    cost as little CPU as possible (16 of them share one interpreter)."""

    def __init__(self, port, timeout=60):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise ConnectionError("connection closed by the server")
        self.buf = self.buf[self.pos:] + d
        self.pos = 0

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = self.buf[self.pos:i]
                self.pos = i + 2
                return line
            self._fill()

    def _bulk(self, n):
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        v = self.buf[self.pos:self.pos + n]
        self.pos += n + 2
        return v

    def scan_reply(self):
        """[cursor, [key, ...]] -> (cursor bytes, list of keys); RespError on '-'."""
        line = self._line()
        if line[:1] == b"-":
            raise RespError(line[1:].decode(errors="replace"))
        if line != b"*2":
            raise RuntimeError(f"not a SCAN reply: {line[:80]!r}")
        head = self._line()
        cursor = self._bulk(int(head[1:]))
        head = self._line()
        if head[:1] != b"*":
            raise RuntimeError(f"not a SCAN reply (items): {head[:80]!r}")
        keys = []
        for _ in range(int(head[1:])):
            h = self._line()
            if h[:1] != b"$":
                raise RuntimeError(f"SCAN item is not a bulk string: {h[:80]!r}")
            keys.append(self._bulk(int(h[1:])))
        return cursor, keys


class Seen:
    """The keys one iteration returned: key:<12 digits> and newkey:<12 digits>
    (all this scenario creates) as one byte per number; anything else in a set."""

    def __init__(self, n_keys):
        self.main = bytearray(n_keys)
        self.new = bytearray(1 << 16)
        self.other = set()

    def add(self, keys):
        """Returns how many of `keys` were seen before."""
        dups = 0
        main, new = self.main, self.new
        for k in keys:
            try:
                if k[:4] == b"key:" and len(k) == 16:
                    i = int(k[4:])
                    if i < len(main):
                        if main[i]:
                            dups += 1
                        else:
                            main[i] = 1
                        continue
                elif k[:7] == b"newkey:" and len(k) == 19:
                    i = int(k[7:])
                    if i >= len(new):
                        new.extend(bytes(max(i + 1, 2 * len(new)) - len(new)))
                    if new[i]:
                        dups += 1
                    else:
                        new[i] = 1
                    continue
            except ValueError:
                pass
            if k in self.other:
                dups += 1
            else:
                self.other.add(k)
        return dups


class Iteration(threading.Thread):
    """One whole iteration: `cmd` <cursor> COUNT `count` from 0 to 0, with
    `sleep_s` between calls; bounded by `deadline` (time.time())."""

    def __init__(self, kind, port, cmd, count, sleep_s, n_keys, start, deadline):
        super().__init__(daemon=True)
        self.kind, self.port, self.cmd, self.count = kind, port, cmd, count
        self.sleep_s, self.n_keys, self.start_ev, self.deadline = sleep_s, n_keys, start, deadline
        self.status = "not started"
        self.calls = self.keys = self.dups = 0
        self.seconds = None
        self.error = ""

    def run(self):
        conn = None
        t0 = time.time()
        try:
            conn = Resp(self.port, timeout=max(5.0, min(60.0, self.deadline - time.time() + 5)))
            seen = Seen(self.n_keys)
            cmd = self.cmd.encode()
            count = str(self.count).encode()
            self.start_ev.wait(120)
            t0 = time.time()
            cursor = b"0"
            self.status = "unfinished"
            max_calls = self.n_keys * 4 // self.count + 1_000_000  # a bound, never reached
            while self.calls < max_calls:
                if time.time() > self.deadline:
                    break
                conn.send(cmd, cursor, b"COUNT", count)
                try:
                    cursor, keys = conn.scan_reply()
                except RespError as e:
                    self.calls += 1
                    self.error = str(e)
                    self.status = "ended" if "ended" in self.error else "error"
                    break
                self.calls += 1
                self.keys += len(keys)
                self.dups += seen.add(keys)
                if cursor == b"0":
                    self.status = "completed"
                    break
                if self.sleep_s:
                    time.sleep(self.sleep_s)
        except Exception as e:  # noqa: BLE001 - reported with the iteration
            self.status = "error"
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.seconds = time.time() - t0
            if conn:
                conn.close()



def deadline_s(ctx, n_keys):
    """How long the iterations may take: generous for this 2-core machine
    (the fast ones are Python, about 1-2 us per key returned, 16 of them)."""
    return max(60, 60 + 120 * n_keys / 1_000_000)


def survival(ctx, n_keys, rate):
    """One run on a fresh server; returns a dict of everything measured."""
    s = ctx.server(module=True)
    try:
        native = True
        try:
            s.r.execute_command("CONFIG", "SET", "snapshot.serve-native", "all")
        except redis.ResponseError as e:
            native = False
            log(f"  CONFIG SET snapshot.serve-native all: {e} (no served native iteration)")
        done, t = ctx.sclient.write(s.port, ["SET", "key:{k}", VALUE], n_keys, seed=0, depth=64,
                                    conns=2, seconds=1800)
        if done != n_keys:
            raise RuntimeError(f"loaded {done} of {n_keys} keys")
        s.wait_index(1800)
        time.sleep(1.0)  # let the log drain and the reaper free what the load left
        si = s.snap_info()
        index0 = int(si["index_memory_bytes"]) if "index_memory_bytes" in si else None
        heap0 = int(si["module_heap_bytes"]) if "module_heap_bytes" in si else None
        served0 = int(si["scans_served"]) if "scans_served" in si else None
        cap = int(si["retained_limit_bytes"]) if "retained_limit_bytes" in si else None
        cap_source = si.get("retained_limit_source", "missing")
        limit = deadline_s(ctx, n_keys)
        mib = lambda x: "missing" if x is None else f"{x / 2**20:.1f} MiB"  # noqa: E731
        log(f"  {n_keys:,} keys loaded in {t:.1f}s; index {mib(index0)}, module heap "
            f"{mib(heap0)}, retained limit {mib(cap)} ({cap_source}); {fmt(rate)} writes/s, "
            f"deadline {limit:.0f}s")

        # The write load: one paced sclient per command kind, RATE/3 each.
        per = rate / 3
        run_s = limit + 60
        total = int(per * run_s) + 1
        streams = [("SET existing", ["SET", "key:{k}", VALUE], 77, n_keys),
                   ("DEL", ["DEL", "key:{k}"], 23, n_keys),
                   ("SET new EX 600", ["SET", "newkey:{k}", VALUE, "EX", 600], 0, total)]
        loads = []
        sampler = None
        its = []
        try:
            for _, cmd, seed, rng in streams:
                loads.append(ctx.sclient.start(s.port, "write",
                                               ["--count", total, "--range", rng, "--seed", seed,
                                                "--depth", 16, "--rate", per, "--seconds", run_s],
                                               cmd))
            sampler = InfoSampler(s.port, PEAK_FIELDS,
                                  ratio=("module_heap_bytes", "retained_index_peak_bytes"))
            time.sleep(1.0)  # the load is steady
            start = threading.Event()
            deadline = time.time() + limit
            for i in range(FAST):
                its.append(Iteration("fast", s.port, "SNAPSHOT.SCAN", 100, 0, n_keys, start,
                                     deadline))
            its.append(Iteration("slow", s.port, "SNAPSHOT.SCAN", 100, SLOW_SLEEP_S, n_keys, start,
                                 deadline))
            if native:
                its.append(Iteration("native", s.port, "SCAN", 10, 0, n_keys, start, deadline))
            for it in its:
                it.start()
            time.sleep(0.2)  # every thread connected and waiting
            t_start = time.time()
            start.set()
            for it in its:
                it.join(max(1.0, deadline - time.time() + 90))
            wall = time.time() - t_start
            stuck = [it for it in its if it.is_alive()]
            if stuck:
                raise RuntimeError(f"{len(stuck)} iteration thread(s) still running 90 s past "
                                   f"the deadline")
        finally:
            outs = []
            for p in loads:
                try:
                    outs.append(Sclient.finish(p))
                except Exception as e:  # noqa: BLE001 - reported below
                    outs.append({"n": 0, "elapsed_us": 1, "errors": 1, "first_error": str(e)})
            if sampler:
                sampler.stop()
        si = s.snap_info()
        counters = {k: int(v) for k, v in si.items()
                    if k.startswith("cursors_evicted") or k == "cursors_expired"}
        # snapshot_scans_served counts every call served from a snapshot, the
        # SNAPSHOT.SCAN calls included: the rest are the native iteration's.
        served = None
        if served0 is not None and "scans_served" in si:
            served = int(si["scans_served"]) - served0 - sum(it.calls for it in its
                                                              if it.kind != "native")
        load_errs = [f"{name}: {o['first_error']}" for (name, *_), o in zip(streams, outs)
                     if o.get("errors")]
        writes = {name: (o["n"], o["n"] / max(o["elapsed_us"], 1) * 1e6)
                  for (name, *_), o in zip(streams, outs)}
        return dict(n_keys=n_keys, rate=rate, index0=index0, heap0=heap0, cap=cap,
                    cap_source=cap_source, its=its, wall=wall,
                    limit=limit, sampler=sampler, counters=counters, served=served,
                    native=native, writes=writes, load_errs=load_errs, dbsize=s.r.dbsize())
    finally:
        s.stop()


def summarize(m):
    """Per kind: counts and figures; and the goal's three parts."""
    out = {}
    for kind in KINDS:
        its = [it for it in m["its"] if it.kind == kind]
        if not its:
            out[kind] = None
            continue
        st = {k: sum(1 for it in its if it.status == k)
              for k in ["completed", "ended", "unfinished", "error", "not started"]}
        secs = [it.seconds for it in its if it.seconds is not None]
        out[kind] = dict(n=len(its), **st, sec_min=min(secs) if secs else None,
                         sec_med=median(secs), sec_max=max(secs) if secs else None,
                         calls=median([it.calls for it in its]),
                         keys=median([it.keys for it in its]),
                         dups=sum(it.dups for it in its),
                         errors=sorted({it.error for it in its if it.error}))
    return out


def report(ctx, m, label, record_targets=True):
    res = ctx.results
    summ = summarize(m)
    smp = m["sampler"]
    peak_heap = smp.get("module_heap_bytes")
    peak_ret = smp.get("retained_bytes")
    ratio = peak_heap / m["index0"] if peak_heap is not None and m["index0"] else None
    mib = lambda x: "missing" if x is None else f"{x / 2**20:.1f}M"  # noqa: E731
    wr = ", ".join(f"{name} {fmt(round(r))}/s" for name, (_, r) in m["writes"].items())
    total_rate = sum(r for _, r in m["writes"].values())
    log(f"  [{label}] writes achieved {fmt(round(total_rate))}/s of {fmt(m['rate'])} ({wr}); "
        f"iterations took {m['wall']:.1f}s wall; DBSIZE at the end {m['dbsize']:,}")
    if m["load_errs"]:
        log(f"  write load errors: {'; '.join(m['load_errs'])}")
    log(f"  {'kind':7s} {'n':>3s} {'done':>4s} {'ended':>5s} {'unfin':>5s} {'err':>3s} "
        f"{'s min':>7s} {'s med':>7s} {'s max':>7s} {'pages':>9s} {'keys':>11s} {'dups':>6s}")
    for kind in KINDS:
        k = summ[kind]
        if k is None:
            log(f"  {kind:7s} not run (no snapshot.serve-native on this server)")
            continue
        f = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
        log(f"  {kind:7s} {k['n']:3d} {k['completed']:4d} {k['ended']:5d} {k['unfinished']:5d} "
            f"{k['error'] + k['not started']:3d} {f(k['sec_min']):>7s} {f(k['sec_med']):>7s} "
            f"{f(k['sec_max']):>7s} {fmt(k['calls']):>9s} {fmt(k['keys']):>11s} {k['dups']:6d}"
            + (f"  ({k['errors'][0][:100]})" if k["errors"] else ""))
        variant = f"{label} {kind}"
        for metric, v, unit in [("iterations", k["n"], ""), ("completed", k["completed"], ""),
                                ("ended", k["ended"], ""), ("unfinished", k["unfinished"], ""),
                                ("errors", k["error"] + k["not started"], ""),
                                ("seconds_median", k["sec_med"], "s"),
                                ("seconds_max", k["sec_max"], "s"),
                                ("calls_median", k["calls"], ""), ("keys_median", k["keys"], ""),
                                ("duplicates", k["dups"], "")]:
            res.record(SC, metric, v, unit, variant=variant)
    live_peak = smp.get("retained_index_peak_bytes")
    over_live = f" (peak heap {peak_heap / live_peak:.2f}x it)" if peak_heap and live_peak else ""
    log(f"  memory: index before the load {mib(m['index0'])}, heap before {mib(m['heap0'])}, "
        f"retained limit {mib(m['cap'])} ({m['cap_source']}), "
        f"peak heap {mib(peak_heap)} (" + (f"{ratio:.2f}x the index" if ratio is not None
                                          else "ratio n/a") +
        f"), peak retained {mib(peak_ret)}, peak retained versions "
        f"{smp.get('retained_versions') if smp.get('retained_versions') is not None else 'missing'}, "
        f"peak undo entries {fmt(smp.get('history_entries')) if smp.get('history_entries') is not None else 'missing'} "
        f"({mib(smp.get('history_bytes'))}); largest live index during the run "
        f"{mib(smp.get('retained_index_peak_bytes'))}{over_live} "
        f"({smp.samples} INFO samples, longest gap {smp.max_gap:.2f}s)")
    at = smp.at_peak
    if at:
        parts = [f"{f} {mib(int(at['snapshot_' + f]))}" for f in
                 ("index_memory_bytes", "retained_bytes", "history_bytes", "filter_bytes")
                 if "snapshot_" + f in at]
        parts += [f"{f} {fmt(int(at['snapshot_' + f]))}" for f in
                  ("history_entries", "history_in_place", "index_backlog", "iterations_open")
                  if "snapshot_" + f in at]
        log("  at the heap's peak: " + ", ".join(parts))
    if smp.missing:
        log(f"  INFO fields missing on this server: "
            f"{', '.join('snapshot_' + f for f in sorted(smp.missing))}")
    log("  counters: " + (", ".join(f"snapshot_{k} {v}" for k, v in m["counters"].items())
                          or "no snapshot_cursors_evicted*/expired field")
        + (f"; native SCAN calls served from snapshots {m['served']:,} (of "
           f"{summ['native']['calls'] if summ['native'] else 0:,})" if m["served"] is not None
           else "; snapshot_scans_served missing"))
    for metric, v, unit in [("index_bytes", m["index0"], "bytes"),
                            ("heap_before_bytes", m["heap0"], "bytes"),
                            ("retained_limit_bytes", m["cap"], "bytes"),
                            ("peak_heap_bytes", peak_heap, "bytes"),
                            ("peak_retained_bytes", peak_ret, "bytes"),
                            ("peak_retained_versions", smp.get("retained_versions"), ""),
                            ("peak_heap_over_index", ratio, "x"),
                            ("writes_per_s", total_rate, "1/s"),
                            ("served_native_calls", m["served"], ""),
                            ("wall_seconds", m["wall"], "s")]:
        res.record(SC, metric, v, unit, variant=label,
                   note="missing on this server" if v is None else "")
    for k, v in m["counters"].items():
        res.record(SC, k, v, "", variant=label)

    kinds = [summ[k] for k in KINDS if summ[k] is not None]
    n_its = sum(k["n"] for k in kinds)
    n_done = sum(k["completed"] for k in kinds)
    n_dups = sum(k["dups"] for k in kinds)
    all_done = n_done == n_its and summ["native"] is not None
    if record_targets:
        st1 = res.target(SC, f"iterations completed {label}", n_done / n_its if n_its else None,
                         ">=", 1.0, unit="", quiet=True,
                         note=f"{n_done} of {n_its} completed"
                              + ("" if summ["native"] is not None else "; no native iteration"))
        st2 = res.target(SC, f"duplicates {label}", n_dups, "<=", 0, unit="", quiet=True,
                         note="keys returned more than once within an iteration, all iterations")
        # The README's bound: the heap within twice the largest live index
        # since the oldest open iteration began, both read in one INFO call.
        # Against the index before the load (the ratio above), the keys the
        # load adds (a third of its writes create keys with a TTL) count as
        # old versions too: reported, not the target.
        st3 = res.target(SC, f"heap / live index {label}", smp.max_ratio, "<=", 2.0, unit="x",
                         quiet=True,
                         note=f"largest snapshot_module_heap_bytes / snapshot_retained_index_peak_bytes "
                              f"in one sample; peak heap {mib(peak_heap)}, {ratio:.2f}x the index "
                              f"before the load {mib(m['index0'])}" if ratio is not None else "")
        goal = "PASS" if (st1, st2, st3) == ("PASS",) * 3 and all_done else "MISS"
        log(f"  TARGET every iteration completes: {n_done}/{n_its} -> {st1}")
        log(f"  TARGET no duplicates: {n_dups} -> {st2}")
        log(f"  TARGET heap <= 2 x the largest live index since the iterations began, in every "
            f"sample: " + (f"{smp.max_ratio:.2f}x" if smp.max_ratio is not None
                           else "n/a (a figure is missing)")
            + f" -> {st3} (peak heap {mib(peak_heap)}: "
            + (f"{ratio:.2f}x" if ratio is not None else "n/a")
            + f" the index before the load {mib(m['index0'])})")
        log(f"  GOAL [{label}] every iteration completes, no duplicates, heap <= 2x the live index "
            f"-> {goal}")
    return all_done


def run(ctx):
    rate = rate_from_env()
    sizes = [ctx.pick(200_000, 1_000_000)]
    chosen = os.environ.get("SNAPSCAN_SURVIVAL_KEYS", "").strip()
    if chosen:
        sizes = [int(x) for x in chosen.split(",") if x.strip()]
    elif not ctx.quick:
        need_kb = 10_000_000 * 400 // 1024  # server, index, retained versions, the scanners' maps
        if mem_available_kb() > need_kb:
            sizes.append(10_000_000)
        else:
            log(f"  skipping 10M keys: MemAvailable {mem_available_kb() // 1024} MiB < "
                f"{need_kb // 1024} MiB")
    for n in sizes:
        label = f"{fmt(n)} keys, {fmt(rate)} writes/s"
        log(f"\n  -- {label}")
        m = survival(ctx, n, rate)
        report(ctx, m, label)

    if os.environ.get("SNAPSCAN_SURVIVAL_SEARCH", "") not in ("", "0"):
        n = sizes[0]
        log(f"\n  -- rate search at {fmt(n)} keys: {', '.join(fmt(r) for r in SEARCH_RATES)} "
            f"writes/s")
        best, table = None, []
        for r in SEARCH_RATES:
            label = f"search {fmt(n)} keys, {fmt(r)} writes/s"
            m = survival(ctx, n, r)
            ok = report(ctx, m, label, record_targets=False)
            table.append((r, ok, sum(w for _, w in m["writes"].values())))
            if ok:
                best = r
        log(f"  rate search at {fmt(n)} keys:")
        for r, ok, achieved in table:
            log(f"    {fmt(r):>7s} writes/s (achieved {fmt(round(achieved))}/s): "
                + ("every iteration completed" if ok else "not every iteration completed"))
        log(f"  largest rate at which every iteration completed: "
            + (f"{fmt(best)} writes/s" if best is not None else "none of them"))
        res = ctx.results
        res.record(SC, "max_rate_all_completed", best, "writes/s", variant=f"{fmt(n)} keys",
                   note="none of the rates tried" if best is None else
                   f"rates tried: {' '.join(str(r) for r in SEARCH_RATES)}")
