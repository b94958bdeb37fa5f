"""Helpers shared by the snapscan benchmark scenarios (scripts/bench/s*.py).

Servers run on 127.0.0.1 with a free port in a temporary directory; every
server started here is registered in <tmp>/pids ("pid port" lines) so that
scripts/bench.sh can shut it down even if Python dies. Every wait is bounded.
"""

import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
# SNAPSCAN_MODULE benchmarks another build (e.g. of a clean export of a commit).
MODULE = Path(os.environ.get("SNAPSCAN_MODULE") or ROOT / "target" / "release" / "libsnapscan.so")
BENCH_DIR = ROOT / "bench"

_servers = []  # every Server started and not yet stopped

# Many-core runs (bench.sh --server-cpus/--load-cpus/--io-threads, set by run.py):
# the CPUs every server is pinned to (None: not pinned; the load generators are
# pinned by run.py pinning itself, which its children inherit) and the server's
# io-threads (None: the server's default).
PIN = {"server_cpus": None, "io_threads": None}


def parse_cpus(text):
    """'0-5,8' -> {0, 1, 2, 3, 4, 5, 8} (taskset's list format)."""
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        lo, hi = int(lo), int(hi or lo)
        if hi < lo:
            raise ValueError(f"bad CPU range '{part}'")
        out.update(range(lo, hi + 1))
    if not out:
        raise ValueError(f"no CPUs in '{text}'")
    return out


def log(msg):
    print(msg, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=3):
    if x is None:
        return "n/a"
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary(name):
    # A prepared offline directory (bench.sh --prepare) carries its servers as
    # $SNAPSCAN_SERVERS_DIR/<name>.
    d = os.environ.get("SNAPSCAN_SERVERS_DIR")
    if d:
        path = Path(d) / name
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"server {name} not in {d}")
        return str(path)
    out = subprocess.run([str(ROOT / "scripts" / "servers.sh"), name], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"server {name} not available: {out.stderr.strip()}")
    return out.stdout.strip()


def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


class Ctx:
    """What every scenario gets: mode, server binary, temp dir, results, sclient."""

    def __init__(self, quick, large, server_name, tmp, results, sclient):
        self.quick = quick
        self.large = large
        self.server_name = server_name
        self.binary = server_binary(server_name)
        self.tmp = Path(tmp)
        self.results = results
        self.sclient = sclient
        self.mode = "quick" if quick else "full"

    def pick(self, quick, full):
        return quick if self.quick else full

    def server(self, module=True, **kw):
        s = Server(self.binary, self.tmp, module=module, **kw)
        s.start()
        return s


class Server:
    def __init__(self, binary, tmp, module=True, module_args=(), config=None, label=None,
                 load=None, prefix=(), start_timeout=15):
        self.binary = binary
        # A command the server runs under (e.g. valgrind and its options), and how
        # long it may take to answer PING (longer under valgrind).
        self.prefix = list(prefix)
        self.start_timeout = start_timeout
        self.module = module  # snapscan loaded
        self.load = load  # another module's .so loaded instead (e.g. the no-op subscriber)
        self.module_args = list(module_args)
        self.config = dict(config or {})
        self.label = label or ("module" if module else "plain")
        self.tmp = Path(tmp)
        self.proc = None
        self.port = None
        self.dir = None

    def start(self):
        for attempt in range(5):
            self.port = free_port()
            self.dir = self.tmp / f"srv-{self.port}"
            self.dir.mkdir(parents=True, exist_ok=True)
            args = self.prefix + [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                    "--dir", str(self.dir), "--save", "", "--appendonly", "no",
                    "--daemonize", "no", "--logfile", str(self.dir / "server.log"),
                    "--enable-debug-command", "yes", "--enable-module-command", "yes",
                    "--protected-mode", "yes"]
            if self.module:
                # SNAPSCAN_MODULE_ARGS="worker-nice 19 ..." tries other configs.
                extra = os.environ.get("SNAPSCAN_MODULE_ARGS", "").split()
                args += ["--loadmodule", str(MODULE)] + self.module_args + extra
            elif self.load:
                args += ["--loadmodule", str(self.load)]
            config = dict(self.config)
            if PIN["io_threads"] is not None:
                config.setdefault("io-threads", PIN["io_threads"])
            for k, v in config.items():
                args += [f"--{k}", str(v)]
            cpus = PIN["server_cpus"]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True,
                                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus))
                                         if cpus else None)
            with open(self.tmp / "pids", "a") as f:
                f.write(f"{self.proc.pid} {self.port}\n")
            deadline = time.time() + self.start_timeout
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
                    if r.ping() and int(r.info("server")["process_id"]) == self.proc.pid:
                        r.close()
                        self.r = redis.Redis(host="127.0.0.1", port=self.port,
                                             socket_timeout=900, decode_responses=True)
                        _servers.append(self)
                        return self
                except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                    pass
                time.sleep(0.05)
            tail = self.log_tail()
            self._kill()
            if "Address already in use" not in tail:
                raise RuntimeError(f"server did not start: {tail}")
        raise RuntimeError("no free port found")

    def log_tail(self, n=20):
        try:
            return "\n".join((self.dir / "server.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
                c.execute_command("SHUTDOWN", "NOSAVE")
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self._kill()
        if self in _servers:
            _servers.remove(self)
        self.proc = None

    # -- convenience ---------------------------------------------------------
    def info(self, section=None):
        return self.r.info(section) if section else self.r.info("everything")

    def used_memory(self):
        return int(self.r.info("memory")["used_memory"])

    def rss(self):
        """Resident set size from /proc (INFO's figure may lag)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def cpu(self):
        i = self.r.info("cpu")
        total = float(i["used_cpu_sys"]) + float(i["used_cpu_user"])
        main = None
        if "used_cpu_sys_main_thread" in i:
            main = float(i["used_cpu_sys_main_thread"]) + float(i["used_cpu_user_main_thread"])
        return total, main

    def thread_times(self):
        """{thread name: (cpu seconds, seconds runnable but waiting for a CPU)} summed
        over the server's threads of that name, from /proc/<pid>/task/*/schedstat."""
        out = {}
        base = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"{base}/{tid}/schedstat") as f:
                    run, wait = (int(x) for x in f.read().split()[:2])
            except (OSError, ValueError):
                continue
            if tid == str(self.proc.pid):
                name = "main"
            r, w = out.get(name, (0.0, 0.0))
            out[name] = (r + run / 1e9, w + wait / 1e9)
        return out

    def task_cpu(self):
        """{tid: (name, stat_s, run_s)} for every thread of the server: stat_s is
        utime+stime from /proc/<pid>/task/<tid>/stat (clock ticks), run_s the time on
        a CPU from .../schedstat (nanoseconds; stat_s where schedstat is missing).
        The main thread (tid == pid) is named "main"; others by their comm."""
        out = {}
        base = f"/proc/{self.proc.pid}/task"
        tick = os.sysconf("SC_CLK_TCK")
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/stat") as f:
                    st = f.read()
                name = st[st.index("(") + 1:st.rindex(")")]
                fields = st[st.rindex(")") + 2:].split()
                stat_s = (int(fields[11]) + int(fields[12])) / tick
                try:
                    with open(f"{base}/{tid}/schedstat") as f:
                        run_s = int(f.read().split()[0]) / 1e9
                except (OSError, ValueError, IndexError):
                    run_s = stat_s
            except (OSError, ValueError, IndexError):
                continue  # the thread ended meanwhile
            out[int(tid)] = ("main" if int(tid) == self.proc.pid else name, stat_s, run_s)
        return out

    def snap_info(self):
        return {k[len("snapshot_"):]: v for k, v in self.r.info("snapshot").items()}

    def wait_index(self, timeout=600, what="index"):
        """Waits until no background build runs and index_keys == DBSIZE. Returns seconds."""
        t0 = time.time()
        deadline = t0 + timeout
        while time.time() < deadline:
            si = self.snap_info()
            if int(si.get("backfill_in_progress", 0)) == 0 and \
                    int(si.get("index_keys", -1)) == self.r.dbsize():
                return time.time() - t0
            time.sleep(0.05)
        raise RuntimeError(f"{what}: index not complete after {timeout}s: {self.snap_info()}")

    def populate(self, n, prefix="key", size=None, timeout=900):
        args = ["DEBUG", "POPULATE", n, prefix] + ([size] if size else [])
        self.r.execute_command(*args)
        if self.module:
            return self.wait_index(timeout, "after DEBUG POPULATE")
        return 0.0


def stop_all():
    for s in list(_servers):
        try:
            s.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log(f"  (stopping server on port {s.port}: {e})")


# -- loading data ------------------------------------------------------------
def resp_cmd(*args):
    out = [f"*{len(args)}\r\n"]
    for a in args:
        a = str(a)
        out.append(f"${len(a.encode())}\r\n{a}\r\n")
    return "".join(out)


def gen_strings(n, fmt="key:%012d", value="x" * 16, chunk=50000):
    """RESP SET commands for keys fmt % i, i in [0, n)."""
    v = f"${len(value)}\r\n{value}\r\n"
    for start in range(0, n, chunk):
        parts = []
        for i in range(start, min(n, start + chunk)):
            k = fmt % i
            parts.append(f"*3\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n{v}")
        yield "".join(parts).encode()


def gen_users(users, per_user=10, value="x" * 16, chunk=5000):
    """SET user:<id>:<n> for id in [0, users) (ids zero-padded to 12 digits, as
    redis-benchmark's __rand_int__ is), n in [0, per_user)."""
    v = f"${len(value)}\r\n{value}\r\n"
    for start in range(0, users, chunk):
        parts = []
        for u in range(start, min(users, start + chunk)):
            for n in range(per_user):
                k = f"user:{u:012d}:{n}"
                parts.append(f"*3\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n{v}")
        yield "".join(parts).encode()


def gen_hash(key, fields, per_cmd=1000, value_len=16):
    """HSET key field:<i> <value> in commands of per_cmd fields."""
    for start in range(0, fields, per_cmd):
        args = ["HSET", key]
        for i in range(start, min(fields, start + per_cmd)):
            args += [f"field:{i}", f"v{i:0{value_len - 1}d}"]
        yield resp_cmd(*args).encode()


def pipe_load(server, chunks, expect=None, timeout=900):
    """Feeds RESP chunks to `redis-cli --pipe`; checks there were no errors."""
    t0 = time.time()
    p = subprocess.Popen(["redis-cli", "-h", "127.0.0.1", "-p", str(server.port), "--pipe",
                          "--pipe-timeout", "60"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for c in chunks:
            p.stdin.write(c)
            if time.time() - t0 > timeout:
                raise RuntimeError("pipe load took too long")
        p.stdin.close()
        out = p.stdout.read().decode(errors="replace")
        p.wait(timeout=max(10, timeout - (time.time() - t0)))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    m = re.search(r"errors: (\d+), replies: (\d+)", out)
    if not m or int(m.group(1)) != 0:
        raise RuntimeError(f"redis-cli --pipe failed: {out.strip()[-500:]}")
    if expect is not None and int(m.group(2)) != expect:
        raise RuntimeError(f"redis-cli --pipe: {m.group(2)} replies, expected {expect}")
    return time.time() - t0


# -- sclient (C helper) --------------------------------------------------------
class Sclient:
    def __init__(self, tmp):
        built = os.environ.get("SNAPSCAN_SCLIENT")  # prebuilt (bench.sh --prepare)
        if built:
            self.path = built
            return
        self.path = str(Path(tmp) / "sclient")
        src = Path(__file__).resolve().parent / "sclient.c"
        subprocess.run(["cc", "-O2", "-o", self.path, str(src)], check=True, timeout=120)

    def _args(self, port, mode, opts=(), cmd=()):
        a = [self.path, str(port), mode] + [str(o) for o in opts]
        if cmd:
            a += ["--"] + [str(c) for c in cmd]
        return a

    def run(self, port, mode, opts=(), cmd=(), timeout=900):
        out = subprocess.run(self._args(port, mode, opts, cmd), capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"sclient {mode} failed: {out.stderr.strip()}")
        return json.loads(out.stdout)

    def start(self, port, mode, opts=(), cmd=()):
        return subprocess.Popen(self._args(port, mode, opts, cmd), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def write(self, port, cmd, count, first=0, range_=None, seed=0, depth=16, conns=1,
              rate=0, seconds=600):
        """Sends `count` pipelined commands (sclient write mode: "{k}" in an argument
        is the 12-digit permuted index) over `conns` connections (one process each,
        disjoint slices of [first, first+count)); returns (commands acknowledged, s)."""
        range_ = range_ or first + count
        procs = []
        t0 = time.time()
        per = -(-count // conns)
        for c in range(conns):
            f = first + c * per
            n = min(per, first + count - f)
            if n <= 0:
                break
            opts = ["--count", n, "--first", f, "--range", range_, "--seed", seed,
                    "--depth", depth, "--seconds", seconds]
            if rate:
                opts += ["--rate", rate / conns]
            procs.append(self.start(port, "write", opts, cmd))
        total = 0
        errs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            if p.returncode != 0 or not out.strip():
                errs.append(err.strip() or f"exit status {p.returncode}")
                continue
            j = json.loads(out)
            total += j["n"]
            if j["errors"]:
                errs.append(j["first_error"])
        if errs:
            raise RuntimeError(f"sclient write {' '.join(map(str, cmd))}: {errs[0]}")
        return total, time.time() - t0

    @staticmethod
    def finish(p, timeout=30):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if not out.strip():
            raise RuntimeError(f"sclient gave no output: {err.strip()}")
        return json.loads(out)


class InfoSampler:
    """Polls INFO snapshot every `period` s on its own connection; keeps the
    peaks of `fields` (names after `snapshot_`) and which of them the server
    does not have: a missing figure is reported missing, never read as 0."""

    def __init__(self, port, fields, period=0.1, limit_s=3600, ratio=None):
        self.fields = list(fields)
        # (numerator, denominator) field names: the largest ratio of the two
        # within one sample (both read at the same instant).
        self.ratio = ratio
        self.max_ratio = None
        self.r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30,
                             decode_responses=True)
        self.period, self.limit_s = period, limit_s
        self.peak = {}
        # The whole sample at the peak of the first field.
        self.at_peak = {}
        self.missing = set()
        self.samples = 0
        self.max_gap = 0.0
        self.error = None
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        t0 = last = time.time()
        try:
            while not self.stop_ev.is_set() and time.time() - t0 < self.limit_s:
                i = self.r.info("snapshot")
                now = time.time()
                if self.samples:
                    self.max_gap = max(self.max_gap, now - last)
                last = now
                first = i.get("snapshot_" + self.fields[0]) if self.fields else None
                if first is not None and int(first) >= self.peak.get(self.fields[0], 0):
                    self.at_peak = dict(i)
                if self.ratio:
                    a, b = (i.get("snapshot_" + f) for f in self.ratio)
                    if a is not None and b is not None and int(b) > 0:
                        q = int(a) / int(b)
                        self.max_ratio = q if self.max_ratio is None else max(self.max_ratio, q)
                for f in self.fields:
                    v = i.get("snapshot_" + f)
                    if v is None:
                        self.missing.add(f)
                    else:
                        self.peak[f] = max(self.peak.get(f, 0), int(v))
                self.samples += 1
                self.stop_ev.wait(self.period)
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self):
        self.stop_ev.set()
        self.t.join(30)
        self.r.close()
        if self.error:
            raise RuntimeError(f"INFO sampler: {self.error}")

    def get(self, f):
        """The peak, or None when the server has no such field."""
        return None if f in self.missing or f not in self.peak else self.peak[f]

    def require(self, f):
        """The peak; raises when the server has no such field."""
        v = self.get(f)
        if v is None:
            raise RuntimeError(f"INFO snapshot has no snapshot_{f}")
        return v



class Probe:
    """A PING loop in its own process measuring main-thread stalls."""

    def __init__(self, ctx, port):
        self.p = ctx.sclient.start(port, "ping", ["--seconds", 900])
        time.sleep(0.2)

    def stop(self):
        time.sleep(0.1)
        return Sclient.finish(self.p)


# -- the no-op subscriber module ----------------------------------------------
def noop_module(tmp):
    """Compiles scripts/bench/noop_module.c against redismodule.h of the
    redis-module 2.0.8 crate (in ~/.cargo/registry); returns the .so path.
    $SNAPSCAN_NOOP_MODULE names a prebuilt one (bench.sh --prepare)."""
    import glob
    if os.environ.get("SNAPSCAN_NOOP_MODULE"):
        return Path(os.environ["SNAPSCAN_NOOP_MODULE"])
    heads = sorted(glob.glob(os.path.expanduser(
        "~/.cargo/registry/src/*/redis-module-2.0.8/src/include/redismodule.h")))
    if not heads:
        raise RuntimeError("redismodule.h not found under ~/.cargo/registry/src/*/"
                           "redis-module-2.0.8/src/include/ (run cargo build once to fetch "
                           "the redis-module crate)")
    out = Path(tmp) / "noopsub.so"
    src = Path(__file__).resolve().parent / "noop_module.c"
    r = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I", os.path.dirname(heads[-1]),
                        "-o", str(out), str(src)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"cannot build the no-op subscriber module: {r.stderr.strip()[-500:]}")
    return out


# -- redis-benchmark -----------------------------------------------------------
def redis_benchmark(port, args, timeout=600):
    """Runs redis-benchmark (non-quiet, --precision 3); returns {test: stats}.

    stats: rps, avg, min, p50, p95, p99, max (ms, from the summary), p999 (ms, from
    "Latency by percentile distribution": the first percentile >= 99.9%), requests.
    """
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "--precision", "3"] + \
        [str(a) for a in args]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    text = out.stdout.replace("\r", "\n")
    if out.returncode != 0 or "Error from server" in text + out.stderr:
        bad = [l for l in (text + out.stderr).splitlines() if "rror" in l][:3]
        raise RuntimeError(f"redis-benchmark failed ({out.returncode}): {' | '.join(bad)}")
    res = {}
    for sec in re.split(r"^====== ", text, flags=re.M)[1:]:
        name = sec.split(" ======", 1)[0].strip()
        st = {}
        m = re.search(r"(\d+) requests completed in ([\d.]+) seconds", sec)
        if m:
            st["requests"] = int(m.group(1))
            st["seconds"] = float(m.group(2))
        m = re.search(r"throughput summary: ([\d.]+) requests per second", sec)
        if m:
            st["rps"] = float(m.group(1))
        m = re.search(r"avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                      r"([\d.]+)\s+([\d.]+)\s+([\d.]+)", sec)
        if m:
            for k, v in zip(["avg", "min", "p50", "p95", "p99", "max"], m.groups()):
                st[k] = float(v)
        for m in re.finditer(r"^([\d.]+)% <= ([\d.]+) milliseconds", sec, flags=re.M):
            if float(m.group(1)) >= 99.9:
                st["p999"] = float(m.group(2))
                break
        if "rps" in st:
            # CPU seconds of the load generator (the whole run: all its tests).
            st["client_cpu_s"] = client_cpu
            res[name] = st
    if not res:
        raise RuntimeError(f"cannot parse redis-benchmark output: {text[-500:]}")
    return res


def rb_one(port, args, timeout=600):
    """redis-benchmark with a single test (e.g. an arbitrary command): its stats."""
    res = redis_benchmark(port, args, timeout)
    return next(iter(res.values()))


def calibrated_n(port, args_before_cmd, cmd, seconds, lo=200, hi=5_000_000):
    """Request count for a run of about `seconds` (from a short calibration run)."""
    st = rb_one(port, args_before_cmd + ["-n", lo] + cmd)
    return int(min(hi, max(lo, st["rps"] * seconds)))


# -- results -------------------------------------------------------------------
class Results:
    FIELDS = ["run_id", "time", "mode", "server", "scenario", "metric", "variant", "value",
              "unit", "target", "status", "note"]

    def __init__(self, run_id, mode, server):
        self.run_id, self.mode, self.server = run_id, mode, server
        self.rows = []
        BENCH_DIR.mkdir(exist_ok=True)
        self.csv = BENCH_DIR / "results.csv"

    def record(self, scenario, metric, value, unit="", variant="", target="", status="", note=""):
        row = dict(run_id=self.run_id, time=time.strftime("%Y-%m-%dT%H:%M:%S"), mode=self.mode,
                   server=self.server, scenario=scenario, metric=metric, variant=variant,
                   value=value if value is not None else "", unit=unit, target=target,
                   status=status, note=note)
        self.rows.append(row)
        new = not self.csv.exists()
        with open(self.csv, "a") as f:
            if new:
                f.write(",".join(self.FIELDS) + "\n")
            f.write(",".join(_csv(row[k]) for k in self.FIELDS) + "\n")

    def target(self, scenario, name, value, op, threshold, unit="x", note="", quiet=False):
        """Records and prints a target check. op: '>=' or '<='. quiet: only recorded
        (the scenario prints it in its own table). Returns PASS, MISS or ERROR."""
        if value is None:
            status = "ERROR"
        elif op == ">=":
            status = "PASS" if value >= threshold else "MISS"
        else:
            status = "PASS" if value <= threshold else "MISS"
        if not quiet:
            log(f"  TARGET {name}: {fmt(value)}{unit} (target {op} {threshold}{unit}) -> {status}"
                + (f"  [{note}]" if note else ""))
        self.record(scenario, name, value, unit, target=f"{op} {threshold}{unit}", status=status,
                    note=note)
        return status


def _csv(v):
    if isinstance(v, float):
        v = f"{v:.6g}"
    v = str(v)
    if any(c in v for c in ',"\n'):
        v = '"' + v.replace('"', '""') + '"'
    return v


def install_signal_handlers():
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def alternate(rounds, variants):
    """A B A B ...: yields (round, variant) for every variant in every round."""
    for r in range(rounds):
        for v in variants:
            yield r, v


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[:3]
    except OSError:
        return ["?"] * 3


if __name__ == "__main__":
    sys.exit("lib.py is a library")
