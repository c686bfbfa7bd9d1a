#!/usr/bin/env python3
# Usage: bench/proxy/idle-rss.py PATH/TO/bulkhead N [MODE]   (loopback ports 18931-18933)
# RSS of `bulkhead proxy` per client connection, N connections held in one
# state (all within the 30 s header timeout):
#   h2c-idle       (default) the HTTP/2 preface and an empty SETTINGS frame, then nothing;
#   h1-partial     an HTTP/1.1 request head 1 KiB short of the 32 KiB limit, never finished;
#   h2-partial     an HTTP/2 HEADERS frame without END_HEADERS carrying 15 KiB of a
#                  header block (the header list limit is 16 KiB), never finished.
# The partial modes are the worst a client can hold a connection in before admission.
import socket, subprocess, sys, time, os, tempfile, json
binary, n = sys.argv[1], int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "h2c-idle"
d = tempfile.mkdtemp()
open(os.path.join(d, "pools.json"), "w").write(json.dumps({"version":1,"bulkhead":"b","resource":"r","scope":"Instance","dividedBy":1,"capacity":2,"sharedSurplus":1,"onCeiling":"reject","classes":[{"name":"a","reserved":1,"ceiling":2,"critical":False}]}))
p = subprocess.Popen([binary, "proxy", "--config-dir", d, "--listen", "127.0.0.1:18931", "--upstream", "http://127.0.0.1:18932",
                      "--classify", "header:x", "--admin", "127.0.0.1:18933", "--workers", "1", "--max-connections", str(n + 100)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def rss():
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmRSS"): return int(line.split()[1])
def frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
if mode == "h2c-idle":
    hello = preface
elif mode == "h1-partial":
    hello = b"GET / HTTP/1.1\r\nhost: b\r\nx-pad: " + b"a" * (31 << 10)
elif mode == "h2-partial":
    # HPACK: a literal header without indexing, new name "x-pad", a 15 KiB value (length as a 7-bit prefix integer).
    length = 15 << 10
    value_len = bytes([0x7f]) + bytes(b | 0x80 for b in [(length - 127) & 0x7f]) + bytes([(length - 127) >> 7])
    block = bytes([0x00, 5]) + b"x-pad" + value_len + b"a" * length
    hello = preface + frame(1, 0, 1, block[:16000])
else:
    sys.exit(f"unknown mode {mode}")
time.sleep(1.0)
base = rss()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 18931)); s.sendall(hello); socks.append(s)
time.sleep(2.0)
after = rss()
alive = p.poll() is None
print(f"mode={mode} connections={n} rss_before_kib={base} rss_after_kib={after} per_connection_kib={(after-base)/n:.1f} proxy_alive={alive}")
p.kill()
