"""One connection per request between two hosts (a benchmark, not a test):
the server side accepts N connections, reading 4 bytes and answering 4 on
each before it closes; the client side makes them one after another and
prints the mean time per connection in microseconds. Run in two network
namespaces by `tests/sock/conn_bench.sh BINDIR ROUNDS N hosts`.
    python3 conn_rate_net.py server ADDR PORT N   (prints "ready" when listening)
    python3 conn_rate_net.py client ADDR PORT N"""
import socket
import sys
import time

from hosts_subprocess import read_exactly

role, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "server":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(128)
    print("ready", flush=True)
    for _ in range(n):
        s, _ = ls.accept()
        read_exactly(s, 4)
        s.sendall(b"pong")
        s.close()
else:
    start = time.monotonic()
    for _ in range(n):
        c = socket.create_connection((addr, port))
        c.sendall(b"ping")
        if read_exactly(c, 4) != b"pong":
            sys.exit(1)
        c.close()
    print(f"{(time.monotonic() - start) * 1e6 / n:.0f}")
