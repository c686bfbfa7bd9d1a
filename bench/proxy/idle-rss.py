#!/usr/bin/env python3
# Usage: bench/proxy/idle-rss.py PATH/TO/bulkhead N   (loopback ports 18931-18933)
# RSS of `bulkhead proxy` per idle h2c connection: N connections that send the
# HTTP/2 preface and an empty SETTINGS frame, then nothing.
import socket, subprocess, sys, time, os, tempfile, json
binary, n = sys.argv[1], int(sys.argv[2])
d = tempfile.mkdtemp()
open(os.path.join(d, "pools.json"), "w").write(json.dumps({"version":1,"bulkhead":"b","resource":"r","scope":"Instance","dividedBy":1,"capacity":2,"sharedSurplus":1,"onCeiling":"reject","classes":[{"name":"a","reserved":1,"ceiling":2,"critical":False}]}))
p = subprocess.Popen([binary, "proxy", "--config-dir", d, "--listen", "127.0.0.1:18931", "--upstream", "http://127.0.0.1:18932",
                      "--classify", "header:x", "--admin", "127.0.0.1:18933", "--workers", "1", "--max-connections", str(n + 100)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def rss():
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmRSS"): return int(line.split()[1])
time.sleep(1.0)
base = rss()
socks = []
preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 18931)); s.sendall(preface); socks.append(s)
time.sleep(2.0)
after = rss()
print(f"connections={n} rss_before_kib={base} rss_after_kib={after} per_connection_kib={(after-base)/n:.1f}")
p.kill()
