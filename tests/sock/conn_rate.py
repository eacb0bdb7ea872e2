"""One connection per request (a benchmark, not a test): a client makes N
connections one after another to a server in the same process tree, each
sending 4 bytes and reading 4 back before it closes; prints the mean time
per connection. tests/sock/conn_bench.sh runs it with and without viarun.
    python3 tests/sock/conn_rate.py N"""
import os
import socket
import sys
import time

from hosts_subprocess import listen_local, read_exactly

n = int(sys.argv[1])
ls, port = listen_local(128)

pid = os.fork()
if pid == 0:
    ls.close()
    start = time.monotonic()
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"ping")
        got = read_exactly(c, 4)
        c.close()
        if got != b"pong":
            os._exit(1)
    print(f"{(time.monotonic() - start) * 1e6 / n:.0f}")
    os._exit(0)
for _ in range(n):
    s, _ = ls.accept()
    got = read_exactly(s, 4)
    s.sendall(b"pong" if got == b"ping" else b"????")
    s.close()
_, st = os.waitpid(pid, 0)
sys.exit(0 if st == 0 else 1)
