#!/usr/bin/env python3
"""Python's subprocess on a used connection between hosts, for
tests/sock/hosts.sh: the client uses its connection, then runs `head -c 4`
on it as stdin (Python starts children with vfork, which runs no fork
handler) while the server's next 4 bytes wait unread, then `printf wxyz`
on it as stdout; the server must get those 4 bytes. Under viarun the
children's first calls ask the client's library to hand the connection
back to the kernel while Python waits for them.

With `sibling` (client: the connecting end) or `sibling-accept` (server:
the accepting end), a connection never used by the process holding it is
used by a first program run on it (`first`: 5 bytes each way), which
exits with the VI, then handed to a second one (`sh -c "head -c 5"`),
which must read the peer's next 5 bytes (`world`), sent as soon as the
peer had its answer: they may lie unread in the first program's VI when
it exits. Before, the second program got ECONNRESET between hosts.

  hosts_subprocess.py server ADDR [sibling|sibling-accept|spawn-close|forking]   (prints its port: the readiness signal)
  hosts_subprocess.py client ADDR PORT [sibling|sibling-accept|spawn-close|forking]

With `spawn-close`, a client that ran a program closes its 20 used
connections: the server must read EOF on each (see spawn_close_server).
With `forking`, a forking server (a child per connection) echoes 20
requests, each ending in EOF at the client.
"""
import socket
import subprocess
import sys

# The first program of the sibling modes, on its stdin: speaks first
# (`first`, answered `hello`) or answers (reads `first`, says `hello`).
SPEAKS_FIRST = "import os\nos.write(0, b'first')\nb = b''\nwhile len(b) < 5: b += os.read(0, 5 - len(b))\nassert b == b'hello', b"
ANSWERS = "import os\nb = b''\nwhile len(b) < 5: b += os.read(0, 5 - len(b))\nassert b == b'first', b\nos.write(0, b'hello')"


def listen_local(backlog):
    """A listening socket on a free loopback port, and the port."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(backlog)
    return ls, ls.getsockname()[1]


def read_exactly(c, n):
    got = b""
    while len(got) < n:
        k = c.recv(n - len(got))
        if not k:
            break
        got += k
    return got


def server(addr):
    l = socket.socket()
    l.bind((addr, 0))
    l.listen(1)
    print(l.getsockname()[1], flush=True)
    c, _ = l.accept()
    if read_exactly(c, 1) != b"x":
        sys.exit("server: no first byte")
    c.sendall(b"x")
    c.sendall(b"abcd")
    got = read_exactly(c, 4)
    if got != b"wxyz":
        sys.exit(f"server: got {got!r}, not the child's wxyz")
    c.close()


def second_reads_world(c, who):
    """Runs the first program then `sh -c "head -c 5"` on `c`."""
    subprocess.run([sys.executable, "-c", SPEAKS_FIRST if who == "client" else ANSWERS],
                   stdin=c, check=True, timeout=10)
    p = subprocess.run(["sh", "-c", "head -c 5"], stdin=c, capture_output=True, timeout=10)
    if p.returncode or p.stdout != b"world":
        sys.exit(f"{who}: head gave {p.stdout!r}, status {p.returncode}: {p.stderr!r}")


def plain_peer(c, who):
    """The other end of a sibling mode: answers `first` with `hello` (or
    says `first` and reads `hello`), sends `world` at once, then reads
    EOF as the second program's process closes, never a reset."""
    if who == "server":
        if read_exactly(c, 5) != b"first":
            sys.exit("server: no first")
        c.sendall(b"hello")
    else:
        c.sendall(b"first")
        if read_exactly(c, 5) != b"hello":
            sys.exit("client: no hello")
    c.sendall(b"world")
    expect_end(c, who)


def sibling_server(addr, mode):
    l = socket.socket()
    l.bind((addr, 0))
    l.listen(1)
    print(l.getsockname()[1], flush=True)
    c, _ = l.accept()
    if mode == "sibling-accept":
        second_reads_world(c, "server")
    else:
        plain_peer(c, "server")
    c.close()


def sibling_client(addr, port, mode):
    c = socket.create_connection((addr, port))
    if mode == "sibling":
        second_reads_world(c, "client")
    else:
        plain_peer(c, "client")
    c.close()


def expect_end(c, who):
    """The peer closed: EOF on `c`, never a reset; then closes it."""
    try:
        got = c.recv(1)
    except ConnectionResetError:
        sys.exit(f"{who} reset at the peer's close, not ended")
    if got != b"":
        sys.exit(f"{who} gave {got!r}, not EOF")
    c.close()


SPAWN_CLOSE_N = 20


def spawn_close_server(addr):
    """`spawn-close`: 20 connections, each answered, then each must read
    EOF as the client closes them, as over kernel TCP. The client ran a
    program before closing, so each connection was handed to the kernel
    at its close; closed at once, the client's socket met this end's
    answer to the hand-over and the kernel reset the connection: this
    read got ECONNRESET in 5 of 6 runs."""
    l = socket.socket()
    l.bind((addr, 0))
    l.listen(SPAWN_CLOSE_N)
    print(l.getsockname()[1], flush=True)
    cs = [l.accept()[0] for _ in range(SPAWN_CLOSE_N)]
    for c in cs:
        if read_exactly(c, 5) != b"hello":
            sys.exit("server: no hello")
        c.sendall(b"world")
    for i, c in enumerate(cs):
        expect_end(c, f"server: connection {i}")


def spawn_close_client(addr, port):
    cs = [socket.create_connection((addr, port)) for _ in range(SPAWN_CLOSE_N)]
    for c in cs:
        c.sendall(b"hello")
        if read_exactly(c, 5) != b"world":
            sys.exit("client: no world")
    subprocess.run(["true"], check=True, timeout=10)
    for c in cs:
        c.close()


FORKING_N = 20


def forking_server(addr):
    """`forking`: socketserver's ForkingTCPServer, a child per
    connection (the child uses it first, the parent closes its copy
    unused); each child echoes a line and ends."""
    import socketserver

    class Echo(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(b"echo:" + self.rfile.readline())

    server = socketserver.ForkingTCPServer((addr, 0), Echo)
    print(server.server_address[1], flush=True)
    for _ in range(FORKING_N):
        server.handle_request()
    server.server_close()


def forking_client(addr, port):
    """Each of 20 requests: a line out, its echo back, then EOF (never a
    reset)."""
    for i in range(FORKING_N):
        c = socket.create_connection((addr, port))
        line = b"request %d\n" % i
        c.sendall(line)
        got = b""
        while not got.endswith(b"\n"):
            part = c.recv(100)
            if not part:
                break
            got += part
        if got != b"echo:" + line:
            sys.exit(f"client: request {i} answered {got!r}")
        expect_end(c, f"client: request {i}")


def client(addr, port):
    c = socket.create_connection((addr, port))
    c.sendall(b"x")
    if read_exactly(c, 1) != b"x":
        sys.exit("client: no echo")
    r = subprocess.run(["head", "-c", "4"], stdin=c, stdout=subprocess.PIPE, timeout=10)
    if r.returncode or r.stdout != b"abcd":
        sys.exit(f"client: head read {r.stdout!r} (status {r.returncode})")
    r = subprocess.run(["sh", "-c", "printf wxyz"], stdout=c, timeout=10)
    if r.returncode:
        sys.exit(f"client: printf failed ({r.returncode})")
    c.close()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        if sys.argv[3:] == ["spawn-close"]:
            spawn_close_server(sys.argv[2])
        elif sys.argv[3:] == ["forking"]:
            forking_server(sys.argv[2])
        elif len(sys.argv) > 3:
            sibling_server(sys.argv[2], sys.argv[3])
        else:
            server(sys.argv[2])
    elif sys.argv[4:] == ["spawn-close"]:
        spawn_close_client(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[4:] == ["forking"]:
        forking_client(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 4:
        sibling_client(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        client(sys.argv[2], int(sys.argv[3]))
