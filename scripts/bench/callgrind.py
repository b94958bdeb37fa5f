"""Instruction counts (callgrind) of the write and scan paths: module builds compared
in one run, against the no-op subscriber and no module. Deterministic, so free of
the shared machine's noise; what issue 17 ("no regression, before/after in one
run") and the journal's callgrind figures use.

    scripts/bench/callgrind.sh OLD.so NEW.so [MORE.so ...] [options]

Arms, one after the other, each a server of its own (`activerehashing no`) under
`valgrind --tool=callgrind --separate-threads=yes --instr-atstart=no`: none (no
module), noop (scripts/bench/noop_module.c), then each module build given. Each
arm loads the same --keys keys `key:%012d` (instrumentation off, so loading is
quick; the module arms wait until their index holds them all), switches
instrumentation on, then, for each measurement: zero the counters, run it,
dump (`callgrind_control -d`), wait until the module's indexer has applied
everything (INFO snapshot index_backlog 0) and dump again, so the INFO polls land
in the second dump and not in the command's figures.

Measurements:
- the writes of s6_writes.py (its WORKLOADS and workload(), round 0), --count
  commands each from `sclient write` (one connection, pipelined 16 deep), and,
  right after SET EX existing, the same keys again: SET EX over TTL (a new
  expiry over one, the cache's steady state) and SET over TTL (the TTL removed);
- SNAPSHOT.SCAN (module arms only, after the writes, the keys SET EX new created
  deleted again): --iterations full iterations of `SNAPSHOT.SCAN <c> COUNT 1000`
  (sclient iter), then --scan-calls calls of `SNAPSHOT.SCAN 0 COUNT 1000`
  (sclient repeat: each opens an iteration and leaves it open).

Figures, main thread (valgrind thread 1):
- call: inclusive instructions of the server's command function `call()` (the
  command, the keyspace notifications and Key events it fires, the module
  callbacks they run) per command: the write path's figure;
- unblock: inclusive instructions of `moduleHandleBlockedClients` (where a blocked
  client's reply, written by a worker, is handed to the client on the main thread);
- main: every instruction of the main thread in the dump (with the event loop,
  reading and replying, and serverCron at hz 10: time-based, so slightly run-
  dependent), per command;
- all: every thread, indexer and workers included, both dumps (threads that poll
  on a timer add a little that depends on wall time): informative.

Prints the tables (ratios new/old, each/noop, module overhead over the no-op
subscriber), and for any `call` figure where a later build exceeds the first by
more than --diff-threshold (default 2%), the functions whose self cost per
command moved most (main thread). Dumps of the main thread are kept under
bench/results-callgrind-<run id>/<arm>/ for callgrind_annotate; rows go to
bench/results.csv (scenario "callgrind").
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lib  # noqa: E402
from lib import Results, Sclient, Server, install_signal_handlers, log, noop_module  # noqa: E402
from s6_writes import VALUE, WORKLOADS, workload  # noqa: E402

# The cache's steady state, which round 0 of s6_writes.py does not reach (its
# SET EX existing gives keys without a TTL their first one): right after SET EX
# existing, the same keys (same seed) SET EX again with another TTL, then SET
# without one (the TTL removed).
TTL_WORKLOADS = ["SET EX over TTL", "SET over TTL"]
CG_WORKLOADS = WORKLOADS[:2] + TTL_WORKLOADS + WORKLOADS[2:]


def cg_workload(name, n_keys, n_req):
    """(command, range) of a callgrind workload: s6_writes.py's round 0, or a TTL one."""
    if name == "SET EX over TTL":
        return ["SET", "key:{k}", VALUE, "EX", 3601], n_keys
    if name == "SET over TTL":
        return ["SET", "key:{k}", VALUE], n_keys
    return workload(name, 0, n_keys, n_req)

SC = "callgrind"
SCAN_CALL = "SCAN 0 COUNT 1000"  # one SNAPSHOT.SCAN 0 COUNT 1000 call
SCAN_ITER = "SCAN full iteration"  # one full iteration, COUNT 1000
FNS = ("call", "moduleHandleBlockedClients")


def labels_for(paths):
    """Short distinct labels for module paths: the file name without .so, or,
    where two share it, the first path component that tells them apart."""
    stems = [Path(p).name.removesuffix(".so") for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    parts = [Path(p).resolve().parts for p in paths]
    for i in range(min(len(x) for x in parts)):
        col = [x[i] for x in parts]
        if len(set(col)) == len(col):
            return col
    return [f"build{i + 1}" for i in range(len(paths))]


class Callgrind:
    """A server under callgrind, and its dumps."""

    def __init__(self, binary, tmp, label, load, cluster=False):
        self.label = label
        self.out = Path(tmp) / f"cg-{label}"
        self.out.mkdir(parents=True, exist_ok=True)
        prefix = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                  "--instr-atstart=no", f"--callgrind-out-file={self.out}/cg.out"]
        # activerehashing no: the keyspace's tables rehash only as commands touch
        # them, not in serverCron by the millisecond, so a command's work does not
        # depend on how fast the server ran under valgrind.
        config = {"activerehashing": "no"}
        if cluster:
            # A one-node cluster owning every slot (the server looks keys up
            # per slot, and snapscan reads a parked key by the end of its
            # command: issue 24).
            config.update({"cluster-enabled": "yes", "cluster-config-file": f"nodes-{label}.conf",
                           # the default bus port (port + 10000) may not exist
                           "cluster-port": lib.free_port()})
        self.s = Server(binary, tmp, module=False, load=load, label=label, prefix=prefix,
                        config=config, start_timeout=180)
        self.s.start()
        if cluster:
            self.s.r.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            deadline = time.time() + 120
            while self.s.r.execute_command("CLUSTER", "INFO").find("cluster_state:ok") < 0:
                if time.time() > deadline:
                    raise RuntimeError(f"{label}: the one-node cluster is not ok after 120 s")
                time.sleep(0.1)
        self.dumps = 0

    def control(self, *args):
        r = subprocess.run(["callgrind_control", *args, str(self.s.proc.pid)],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or "OK" not in r.stdout:
            raise RuntimeError(f"callgrind_control {' '.join(args)}: {r.stdout}{r.stderr}")

    def zero(self):
        self.control("--zero")

    def dump(self, what):
        """Dumps the counters (and zeroes them); returns {thread number: file}."""
        # callgrind_control passes the reason on in a monitor command: no spaces
        self.control(f"--dump={re.sub(r'[^A-Za-z0-9]+', '_', what).strip('_')}")
        self.dumps += 1
        pat = str(self.out / f"cg.out.{self.dumps}-*")
        deadline = time.time() + 60
        while time.time() < deadline:
            files = glob.glob(pat)
            if files and all(os.path.getsize(f) > 0 for f in files):
                return {int(f.rsplit("-", 1)[1]): f for f in files}
            time.sleep(0.1)
        raise RuntimeError(f"{self.label}: no dump files {pat}")


def summary(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no summary line in {path}")


_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")


def annotate(path, inclusive):
    """{function name: instructions} from callgrind_annotate (all functions)."""
    incl = "--inclusive=" + ("yes" if inclusive else "no")
    r = subprocess.run(["callgrind_annotate", "--auto=no", incl, "--threshold=100", path],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"callgrind_annotate {path}: {r.stderr.strip()[-300:]}")
    out = {}
    for line in r.stdout.splitlines():
        m = _LINE.match(line)
        if not m or m.group(2) == "PROGRAM TOTALS":
            continue
        rest = m.group(2).rsplit(" [", 1)[0]
        # "file:function": the first ':' that is not part of a '::'
        i = 0
        while True:
            i = rest.find(":", i)
            if i < 0 or rest[i + 1:i + 2] != ":":
                break
            i += 2
        fn = rest[i + 1:] if i >= 0 else rest
        out[fn] = out.get(fn, 0) + int(m.group(1).replace(",", ""))
    return out


def measure(cg, what, n, run, settle, keep):
    """Runs run() between a zero and a dump; returns {figure: instructions per op}
    and the main thread's self costs per op (for the diff)."""
    cg.zero()
    run()
    first = cg.dump(f"{what} ({n} ops)")
    main = first.get(1)
    if main is None:
        raise RuntimeError(f"{cg.label} {what}: no dump of the main thread")
    incl = annotate(main, True)
    self_cost = annotate(main, False)
    tot = sum(summary(f) for f in first.values())
    settle()
    second = cg.dump(f"{what}: settling")
    tot += sum(summary(f) for t, f in second.items() if t != 1)
    if keep:
        d = keep / cg.label
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(main, d / (re.sub(r"[^A-Za-z0-9]+", "_", what).strip("_") + ".main.out"))
    fig = {"call": incl.get("call", 0) / n, "unblock": incl.get(FNS[1], 0) / n,
           "main": summary(main) / n, "all": tot / n}
    return fig, {f: c / n for f, c in self_cost.items()}


def run_arm(args, binary, tmp, sc, label, load, is_snapscan, keep):
    log(f"\n== {label}: {load or 'no module'}")
    t0 = time.time()
    cg = Callgrind(binary, tmp, label, load, cluster=args.cluster)
    s = cg.s
    figs, selfs = {}, {}
    try:
        n, t = sc.write(s.port, ["SET", "key:{k}", VALUE], args.keys, seed=0, depth=64, conns=1,
                        seconds=1200)
        if n != args.keys:
            raise RuntimeError(f"{label}: loaded {n} of {args.keys} keys")
        if is_snapscan:
            s.wait_index(900)
        log(f"  loaded {args.keys:,} keys in {time.time() - t0:.0f}s (started and loaded, "
            f"instrumentation off)")
        cg.control("--instr=on")

        def settle():
            if not is_snapscan:
                return
            deadline = time.time() + 300
            while int(s.snap_info().get("index_backlog", 0)) != 0:
                if time.time() > deadline:
                    raise RuntimeError(f"{label}: index_backlog not 0 after 300 s")
                time.sleep(0.05)

        for w in CG_WORKLOADS:
            cmd, rng = cg_workload(w, args.keys, args.count)
            # s6_writes.py's seeds; the TTL workloads rewrite the keys SET EX
            # existing just gave a TTL (its seed).
            wi = WORKLOADS.index("SET EX existing" if w in TTL_WORKLOADS else w)
            t1 = time.time()

            def go(cmd=cmd, rng=rng, wi=wi, w=w):
                done, _ = sc.write(s.port, cmd, args.count, range_=rng, seed=1000 + wi + 1,
                                   depth=16, conns=1, seconds=1200)
                if done != args.count:
                    raise RuntimeError(f"{label} {w}: {done} of {args.count} commands done")
            figs[w], selfs[w] = measure(cg, w, args.count, go, settle, keep)
            log(f"  {w:16s} call {figs[w]['call']:8.0f}  main {figs[w]['main']:8.0f}  "
                f"all {figs[w]['all']:8.0f} instructions/command ({time.time() - t1:.0f}s)")
        # back to the loaded keys (+ myhash), unmeasured
        done, _ = sc.write(s.port, ["DEL", "e0:{k}"], args.count, range_=args.count, seed=0,
                           depth=64, conns=1, seconds=1200)
        if done != args.count:
            raise RuntimeError(f"{label}: cleanup deleted {done} of {args.count} keys")
        settle()
        if is_snapscan:
            scan = ["SNAPSHOT.SCAN", "{}", "COUNT", 1000]
            for what, mode, k in ((SCAN_ITER, "iter", args.iterations),
                                  (SCAN_CALL, "repeat", args.scan_calls)):
                t1 = time.time()
                got = {}

                def go(mode=mode, k=k, got=got):
                    got.update(sc.run(s.port, mode, ["--repeat", k, "--seconds", 1200], scan,
                                      timeout=1300))
                    if got.get("errors") or got.get("iterations") != k:
                        raise RuntimeError(f"{label} {what}: {got}")
                figs[what], selfs[what] = measure(cg, what, k, go, settle, keep)
                per = f", {got['calls'] / k:.0f} calls and {got['items'] / k:,.0f} keys each" \
                    if mode == "iter" else ""
                log(f"  {what:16s} call {figs[what]['call']:8.0f}  unblock "
                    f"{figs[what]['unblock']:8.0f}  main {figs[what]['main']:8.0f}  all "
                    f"{figs[what]['all']:8.0f} instructions per op ({k} ops{per}; "
                    f"{time.time() - t1:.0f}s)")
    finally:
        s.stop()
    log(f"  {label}: {time.time() - t0:.0f}s")
    return figs, selfs


def fnum(x):
    return f"{x:,.0f}" if x is not None else "-"


def table(title, rows, arms, mods, fig, base="noop"):
    """One table: instructions per op of each arm (builds as A, B, ...), then each
    build over the first (B/A ...), over `base`, and its instructions above `base`."""
    letter = {m: chr(ord("A") + i) for i, m in enumerate(mods)}
    name = {a: letter.get(a, a) for a in arms}
    first = mods[0]
    cols = [f"{name[a]:>10s}" for a in arms]
    cols += [f"{letter[m] + '/' + letter[first]:>8s}" for m in mods[1:]]
    if base:
        cols += [f"{letter[m] + '/' + base:>8s}" for m in mods]
        cols += [f"{letter[m] + '-' + base:>8s}" for m in mods]
    log(f"\n{title}")
    log(f"  {'':20s} " + " ".join(cols))
    out = []
    for w, per in rows:
        v = {a: per[a][fig] if a in per else None for a in arms}
        cells = [f"{fnum(v[a]):>10s}" for a in arms]
        for m in mods[1:]:
            cells.append(f"{v[m] / v[first]:8.3f}" if v[first] else f"{'-':>8s}")
        if base:
            for m in mods:
                cells.append(f"{v[m] / v[base]:8.3f}" if v.get(base) else f"{'-':>8s}")
            for m in mods:
                cells.append(f"{v[m] - v[base]:8,.0f}" if v.get(base) is not None
                             else f"{'-':>8s}")
        log(f"  {w:20s} " + " ".join(cells))
        out.append((w, v))
    return out


def diff(w, a, b, sa, sb, top=12):
    """The functions of the main thread whose self cost per op moved most, a -> b."""
    names = set(sa) | set(sb)
    d = sorted(((sb.get(f, 0.0) - sa.get(f, 0.0), f) for f in names), key=lambda x: -abs(x[0]))
    log(f"\n  {w}: main-thread self cost per op, {a} -> {b} (top {top} moves; "
        f"total {sum(sa.values()):,.0f} -> {sum(sb.values()):,.0f})")
    for delta, f in d[:top]:
        if abs(delta) < 0.5:
            break
        log(f"    {delta:+9.1f}  {sa.get(f, 0.0):9.1f} -> {sb.get(f, 0.0):9.1f}  {f[:150]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="+", help="module builds (.so), the first is the reference")
    ap.add_argument("--labels", default="", help="comma-separated labels of the builds")
    ap.add_argument("--server", default="valkey-9.1")
    ap.add_argument("--keys", type=int, default=100_000, help="keys loaded (default 100000)")
    ap.add_argument("--count", type=int, default=20_000,
                    help="commands per write workload (default 20000)")
    ap.add_argument("--scan-calls", type=int, default=100,
                    help="SNAPSHOT.SCAN 0 COUNT 1000 calls (default 100)")
    ap.add_argument("--iterations", type=int, default=3,
                    help="full SNAPSHOT.SCAN iterations (default 3)")
    ap.add_argument("--no-baselines", action="store_true", help="skip the none and noop arms")
    ap.add_argument("--diff-threshold", type=float, default=1.02)
    ap.add_argument("--cluster", action="store_true",
                    help="every server a one-node cluster owning every slot")
    ap.add_argument("--tmp", default="")
    a = ap.parse_args()
    mods = [str(Path(m).resolve()) for m in a.modules]
    for m in mods:
        if not os.path.isfile(m):
            sys.exit(f"callgrind: {m}: no such file")
    labels = [x.strip() for x in a.labels.split(",")] if a.labels else labels_for(mods)
    if len(labels) != len(mods) or len(set(labels)) != len(labels) or \
            {"none", "noop"} & set(labels):
        sys.exit("callgrind: --labels needs one distinct label per build (not none/noop)")
    if a.count > a.keys:
        sys.exit("callgrind: --count must not exceed --keys")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "cc"):
        if not shutil.which(tool):
            sys.exit(f"callgrind: {tool} not found (apt-get install valgrind)")
    install_signal_handlers()
    tmp = Path(a.tmp or tempfile.mkdtemp(prefix="snapscan-callgrind."))
    run_id = time.strftime("%Y%m%d-%H%M%S")
    results = Results(run_id, "callgrind", a.server)
    keep = lib.BENCH_DIR / f"results-callgrind-{run_id}"
    binary = lib.server_binary(a.server)
    ver = subprocess.run([binary, "--version"], capture_output=True, text=True,
                         timeout=30).stdout.strip().split(" sha=")[0]
    log(f"callgrind: run {run_id}, server {a.server} ({ver}"
        f"{', one-node cluster' if a.cluster else ''}), {a.keys:,} keys, {a.count:,} "
        f"commands per write workload, {a.iterations} full iterations and {a.scan_calls} "
        f"SNAPSHOT.SCAN 0 calls (COUNT 1000); load average {' '.join(lib.loadavg())}")
    for lab, m in zip(labels, mods):
        log(f"  {lab}: {m}")
        results.record(SC, "module", m, variant=lab)
    sc = Sclient(tmp)
    arms = [] if a.no_baselines else [("none", None, False), ("noop", noop_module(tmp), False)]
    arms += [(lab, m, True) for lab, m in zip(labels, mods)]
    per, selfs = {}, {}
    t0 = time.time()
    try:
        for lab, load, snap in arms:
            f, s = run_arm(a, binary, tmp, sc, lab, load, snap, keep)
            for k, v in f.items():
                per.setdefault(k, {})[lab] = v
                selfs.setdefault(k, {})[lab] = s[k]
                for g, x in v.items():
                    results.record(SC, f"instructions_per_op_{g}", x, "instructions",
                                   variant=f"{k} {lab}")
    finally:
        lib.stop_all()
    names = [x[0] for x in arms]
    base = None if a.no_baselines else "noop"
    log(f"\ncallgrind run {run_id} ({time.time() - t0:.0f}s, server {a.server}); instructions "
        f"per command; builds: " + ", ".join(f"{chr(ord('A') + i)} = {lab}"
                                             for i, lab in enumerate(labels))
        + f"; A is the reference")
    writes = [(w, per[w]) for w in CG_WORKLOADS]
    rows = table("Writes, main thread, inclusive in call() (the write path):", writes, names,
                 labels, "call", base)
    table("Writes, main thread, everything (event loop, I/O, cron included):", writes, names,
          labels, "main", base)
    table("Writes, all threads (indexer included; informative):", writes, names, labels, "all",
          base)
    scans = [(w, per[w]) for w in (SCAN_CALL, SCAN_ITER) if w in per]
    for fig, what in (("call", "inclusive in call()"),
                      ("unblock", "inclusive in moduleHandleBlockedClients (the reply)"),
                      ("main", "main thread, everything"),
                      ("all", "all threads (workers included)")):
        table(f"SNAPSHOT.SCAN COUNT 1000, per call / per full iteration, {what}:", scans,
              labels, labels, fig, None)
    worst = []
    for w, v in rows + [(w, {m: per[w][m]["call"] + per[w][m]["unblock"] for m in labels})
                        for w, _ in scans]:
        for m in labels[1:]:
            if v[labels[0]] and v[m] / v[labels[0]] > a.diff_threshold:
                worst.append((w, m, v[m] / v[labels[0]]))
    if worst:
        log(f"\nAbove {a.diff_threshold:.2f}x the reference ({labels[0]}) in call() "
            f"(scans: call + unblock): " + ", ".join(f"{w} {m} {r:.3f}" for w, m, r in worst))
        for w, m, _ in worst:
            diff(w, labels[0], m, selfs[w][labels[0]], selfs[w][m])
    else:
        log(f"\nNo build above {a.diff_threshold:.2f}x the reference ({labels[0]}) in call() "
            f"(scans: call + unblock).")
    log(f"\nmain-thread dumps: {keep}/<arm>/ (callgrind_annotate --inclusive=yes FILE); "
        f"rows in {results.csv}")


if __name__ == "__main__":
    main()
