"""Connections one after another between the same two processes, each
leaving messages behind: under viarun a connection takes up the VI its
predecessor kept (crates/sock/src/link/reuse.rs), and what the last
connection's writer posted after its reader let go must never be read as
the new one's. Each connection carries a random amount one way and its
SHA-256 back; then, by turns, the server writes on after its answer and
the client closes without reading it, or the client writes on and the
server closes without reading, or both shut down cleanly. Every byte is
checked. Exits non-zero on the first wrong byte.
    python3 tests/sock/reuse_check.py N"""
import hashlib
import os
import random
import socket
import struct
import sys

from hosts_subprocess import listen_local, read_exactly

SIZES = [1, 7, 100, 4096, 65535, 65536, 70000, 300000]


def flood(s, n):
    """Writes n small messages, stopping quietly when the peer is gone."""
    try:
        for i in range(n):
            s.send(bytes([i % 251]) * 700)
    except OSError:
        pass


def client(port, n):
    rnd = random.Random(1)
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        data = rnd.randbytes(rnd.choice(SIZES))
        c.sendall(struct.pack("!I", len(data)) + data)
        got = read_exactly(c, 32)
        if got != hashlib.sha256(data).digest():
            print(f"connection {i}: wrong answer {got.hex()}", file=sys.stderr)
            return 1
        turn = i % 3
        if turn == 1:
            flood(c, 40)
        elif turn == 2:
            c.shutdown(socket.SHUT_WR)
            rest = b""
            while True:
                k = c.recv(65536)
                if not k:
                    break
                rest += k
            if rest != b"bye":
                print(f"connection {i}: {len(rest)} bytes after the answer", file=sys.stderr)
                return 1
        c.close()
    return 0


def server(ls, n):
    # A client that failed makes no more connections: no wait for good.
    ls.settimeout(30)
    for i in range(n):
        try:
            s, _ = ls.accept()
        except TimeoutError:
            print(f"connection {i}: the client did not come", file=sys.stderr)
            return 1
        s.settimeout(None)
        size = struct.unpack("!I", read_exactly(s, 4))[0]
        data = read_exactly(s, size)
        s.sendall(hashlib.sha256(data).digest())
        turn = i % 3
        if turn == 0:
            flood(s, 40)
        elif turn == 2:
            if s.recv(1) != b"":
                print(f"connection {i}: data after the client's shutdown", file=sys.stderr)
                return 1
            s.sendall(b"bye")
        s.close()
    return 0


def main():
    n = int(sys.argv[1])
    ls, port = listen_local(16)
    pid = os.fork()
    if pid == 0:
        ls.close()
        os._exit(client(port, n))
    rc = server(ls, n)
    _, st = os.waitpid(pid, 0)
    sys.exit(1 if rc or st else 0)


if __name__ == "__main__":
    main()
