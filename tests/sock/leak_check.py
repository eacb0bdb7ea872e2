"""For tests/sock/run.sh: a server that accepts one connection after
another (a forked client dials 100 times, each connection used both ways
and closed) must hold as many descriptors after the 100th as after the
first (fewer is fine). Under viarun each connection once left its
device listener (a Unix socket) open until the process ended: 99 more
descriptors."""
import os
import socket
import sys

N = 100
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(8)
port = l.getsockname()[1]
pid = os.fork()
if pid == 0:
    for i in range(N):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"x")
        if c.recv(1) != b"y":
            os._exit(1)
        c.close()
    os._exit(0)


def descriptors():
    return len(os.listdir("/proc/self/fd"))


first = None
for i in range(N):
    s, _ = l.accept()
    if s.recv(1) != b"x":
        sys.exit("leak_check: wrong byte")
    s.sendall(b"y")
    if s.recv(1) != b"":
        sys.exit("leak_check: no EOF")
    s.close()
    if first is None:
        first = descriptors()
_, st = os.waitpid(pid, 0)
if st != 0:
    sys.exit("leak_check: the client failed")
last = descriptors()
# Not more than after the first: the VI kept from the connections
# (crates/sock/src/link/reuse.rs: its socket and the client's eventfd)
# may be gone by now, the client having exited.
if last > first:
    sys.exit(f"leak_check: {first} descriptors after the first connection, {last} after {N}")
print(f"leak_check: {N} connections, {last} descriptors after the first and the last: ok")
