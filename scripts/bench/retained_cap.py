#!/usr/bin/env python3
"""Standalone check of snapshot.max-retained-bytes (issue 9, target 3).

1M keys (DEBUG POPULATE); 1,024 times: 200 PEXPIREs on random keys (each
copies a path of the live tree away from the versions open iterations hold),
then SNAPSHOT.SCAN 0 COUNT 1, which opens an iteration pinning the version
of that instant. Prints INFO snapshot's retained bytes and the module heap
every 64 iterations, against the cap.

    /opt/snapscan-venv/bin/python scripts/bench/retained_cap.py SERVER_BINARY CAP_BYTES

(CAP_BYTES 0 = no cap.) Needs target/release/libsnapscan.so.
"""
import os, random, socket, subprocess, sys, tempfile, time

import redis

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
server, cap = sys.argv[1], sys.argv[2]
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
tmp = tempfile.mkdtemp(prefix="snapscan-retained-")
proc = subprocess.Popen(
    [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp,
     "--enable-debug-command", "yes",
     "--loadmodule", os.path.join(root, "target/release/libsnapscan.so"), "max-retained-bytes", cap],
    stdout=open(os.path.join(tmp, "log"), "w"), stderr=subprocess.STDOUT)
try:
    r = redis.Redis(port=port)
    for _ in range(200):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    r.execute_command("DEBUG", "POPULATE", 1_000_000)
    while r.info("snapshot")["snapshot_index_backlog"]:
        time.sleep(0.05)
    index = r.info("snapshot")["snapshot_index_memory_bytes"]
    rnd = random.Random(1)
    peak_retained = peak_heap = 0
    mb = lambda b: "%.1f" % (b / 2**20)
    for i in range(1024):
        pipe = r.pipeline(transaction=False)
        for _ in range(200):
            pipe.pexpire("key:%d" % rnd.randrange(1_000_000), 10**9)
        pipe.execute()
        r.execute_command("SNAPSHOT.SCAN", 0, "COUNT", 1)
        if i % 64 == 63:
            inf = r.info("snapshot")
            peak_retained = max(peak_retained, inf["snapshot_retained_bytes"])
            peak_heap = max(peak_heap, inf["snapshot_module_heap_bytes"])
            print(i + 1, "retained MB", mb(inf["snapshot_retained_bytes"]),
                  "heap MB", mb(inf["snapshot_module_heap_bytes"]),
                  "open", inf["snapshot_open_snapshots"],
                  "ended", inf["snapshot_cursors_evicted_memory"], flush=True)
    print("cap MB", mb(int(cap)), "index MB", mb(index),
          "peak retained MB", mb(peak_retained), "peak heap MB", mb(peak_heap))
finally:
    proc.terminate()
    proc.wait()
