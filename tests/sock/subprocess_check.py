#!/usr/bin/env python3
"""Python's subprocess on sockets, the way programs use it, for
tests/sock/run.sh (run with and without viarun):

- `handoff`: a server hands an accepted, unused connection to `cat` on its
  stdin and stdout with subprocess's defaults (close_fds=True: the child
  closes every other descriptor before exec, with close_range); the
  client's 300 000 bytes must come back intact.
- `used`: a client that already used its connection runs `head -c 4` on
  it, while the server's next 4 bytes already wait unread. head must read
  them, over kernel TCP and under viarun alike (where head's first read
  hands the connection back to the kernel, and takes the 4 bytes from the
  client's ring): never hang, fail or read other bytes. A 10 s limit
  catches a hang.
- `sibling`, `sibling-accept`, `many`, `crowded`: see their functions.
"""
import os
import socket
import subprocess
import sys

from hosts_subprocess import read_exactly


def listener(backlog=1):
    """A TCP listener on loopback and its port."""
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(backlog)
    return l, l.getsockname()[1]


def serve_one(l):
    """A forked server on listener `l`: accepts one connection, answers
    `first` with `hello`, sends `world`, then waits for the end. Its pid."""
    pid = os.fork()
    if pid == 0:
        s, _ = l.accept()
        s.sendall(b"hello" if read_exactly(s, 5) == b"first" else b"?????")
        s.sendall(b"world")
        try:
            s.recv(1)
        except ConnectionResetError:
            pass
        os._exit(0)
    return pid


def judge(mode, p, want, pid):
    """Waits for the server `pid`; passes if `head` (run as `p`) read
    `want`."""
    os.waitpid(pid, 0)
    if p.returncode == 0 and p.stdout == want:
        print(f"subprocess {mode}: ok (carried on)")
    else:
        sys.exit(f"{mode}: head gave {p.stdout!r}, status {p.returncode}: {p.stderr!r}")


def handoff():
    l, port = listener()
    data = os.urandom(300000)
    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        back = bytearray()
        while True:
            b = c.recv(65536)
            if not b:
                break
            back += b
        os._exit(0 if back == data else 1)
    conn, _ = l.accept()
    p = subprocess.Popen(["cat"], stdin=conn, stdout=conn)
    conn.close()
    if p.wait(timeout=30) != 0:
        sys.exit("handoff: cat failed")
    _, st = os.waitpid(pid, 0)
    if st != 0:
        sys.exit("handoff: the echo through cat differs")
    print("subprocess handoff: ok")


def used():
    l, port = listener()
    pid = os.fork()
    if pid == 0:
        s, _ = l.accept()
        s.recv(5)
        s.sendall(b"hello")
        s.sendall(b"more")
        try:
            s.recv(1)  # until the client closes (a reset if it left
        except ConnectionResetError:  # "more" unread, as under viarun)
            pass
        os._exit(0)
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"first")
    got = b""
    while len(got) < 5:
        got += c.recv(5 - len(got))
    if got != b"hello":
        sys.exit(f"used: first reply {got!r}")
    p = subprocess.run(["head", "-c", "4"], stdin=c, capture_output=True, timeout=10)
    c.close()
    judge("used", p, b"more", pid)


def sibling():
    """A connection first used by one program the client runs on it
    (`first`: writes 5 bytes, reads 5), then handed to a second one
    (`sh -c "head -c 5"`). Over kernel TCP head reads the server's next 5 bytes.
    Under viarun the stream was carried by the first program's VI, which
    went with it: head must still read those 5 bytes (the connection goes
    back to the kernel through the control page the parent's record
    holds, or that the first program left on the record's answer
    socket), never other bytes (doorbells), never hang."""
    l, port = listener()
    pid = serve_one(l)
    c = socket.create_connection(("127.0.0.1", port))
    first = "import os\nos.write(0, b'first')\nb = b''\nwhile len(b) < 5: b += os.read(0, 5 - len(b))\nassert b == b'hello', b"
    subprocess.run([sys.executable, "-c", first], stdin=c, check=True, timeout=10)
    # Through a shell, as `sh -c CMD` runs a program: the shell takes the
    # connection up first and execs head, which must get it too (before,
    # the shell's library let go of the record, and head read the kernel
    # stream's doorbells and waited for good).
    p = subprocess.run(["sh", "-c", "head -c 5"], stdin=c, capture_output=True, timeout=10)
    c.close()
    judge("sibling", p, b"world", pid)


def sibling_accept():
    """As `sibling`, on the accepting end: the server hands the accepted
    connection, which it never used, to one program (reads 5 bytes,
    answers 5), then to `sh -c "head -c 5"`. The client sends its second
    word as soon as it has the answer, so it may lie unread in the first
    program's ring when that program exits: head must read it."""
    l, port = listener()
    pid = os.fork()
    if pid == 0:
        l.close()
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"first")
        got = b""
        while len(got) < 5:
            got += c.recv(5 - len(got))
        c.sendall(b"world")
        try:
            c.recv(1)
        except ConnectionResetError:
            pass
        os._exit(0 if got == b"hello" else 1)
    s, _ = l.accept()
    first = "import os\nb = b''\nwhile len(b) < 5: b += os.read(0, 5 - len(b))\nassert b == b'first', b\nos.write(0, b'hello')"
    subprocess.run([sys.executable, "-c", first], stdin=s, check=True, timeout=10)
    p = subprocess.run(["sh", "-c", "head -c 5"], stdin=s, capture_output=True, timeout=10)
    s.close()
    _, st = os.waitpid(pid, 0)
    if p.returncode == 0 and p.stdout == b"world" and st == 0:
        print("subprocess sibling-accept: ok (carried on)")
    else:
        sys.exit(f"sibling-accept: head gave {p.stdout!r}, status {p.returncode}: {p.stderr!r}; client {st}")


def many():
    """A client with 100 connections in use (more than the 32 whose exec
    records the library kept before, and than the 64 an exec looked at)
    runs `head -c 5` on one of the last: head must read the server's next
    5 bytes there, as over kernel TCP. Under viarun it got ECONNRESET
    (the connection had no record, and the exec marked it unusable) or,
    when the exec missed it, hung reading the doorbells as data."""
    n = 100
    l, port = listener(n)
    pid = os.fork()
    if pid == 0:
        conns = [l.accept()[0] for _ in range(n)]
        for s in conns:
            s.sendall(b"hello" if read_exactly(s, 5) == b"first" else b"?????")
        for s in conns:
            s.sendall(b"world")
        for s in conns:
            try:
                s.recv(1)
            except ConnectionResetError:
                pass
        os._exit(0)
    l.close()
    cs = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for c in cs:
        c.sendall(b"first")
        got = read_exactly(c, 5)
        if got != b"hello":
            sys.exit(f"many: answer {got!r}")
    p = subprocess.run(["head", "-c", "5"], stdin=cs[n - 3], capture_output=True, timeout=10)
    for c in cs:
        c.close()
    judge("many", p, b"world", pid)


def crowded():
    """A client whose descriptor table is more than half full (a soft
    limit of 64, its socket past 40) uses a connection and runs `head -c
    5` on it: head must read the server's next 5 bytes. Under viarun such
    a connection gets no exec record, so it must not be carried at all
    (kernel TCP); carried without one, head got ECONNRESET."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    l, port = listener()
    pid = serve_one(l)
    l.close()
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(40)]
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"first")
    if read_exactly(c, 5) != b"hello":
        sys.exit("crowded: no hello")
    p = subprocess.run(["head", "-c", "5"], stdin=c, capture_output=True, timeout=10)
    c.close()
    for f in filler:
        os.close(f)
    judge("crowded", p, b"world", pid)


{"handoff": handoff, "used": used, "sibling": sibling, "sibling-accept": sibling_accept,
 "many": many, "crowded": crowded}[sys.argv[1]]()
