"""A program that uses nearly all of its descriptor limit works under
viarun as over kernel TCP. Started with a soft limit of 1024 (run.sh and
hosts.sh set it and pass it as LIMIT), a client makes 960 connections to
a server, every one answered and checked; its sockets keep the numbers
kernel TCP gives them (below the limit); and a program it runs without
the library sees the limit it started with. Under viarun each carried
connection costs the process descriptors of the library's own: taken out
of the program's limit, they made this client fail with EMFILE after
~250 connections (and a connection reset at ~150, the core's handshake
losing its descriptors), where kernel TCP serves all 960.

  limit_check.py LIMIT                      (server forked, one host)
  limit_check.py LIMIT serve ADDR           (prints its port: the readiness signal)
  limit_check.py LIMIT connect ADDR PORT

With LIMIT_LATE_FIFO=PATH (a fifo) the server accepts only after the
client has made every connection (the client writes a line there): a
late acceptor, with all 960 connections waiting in its listen queue. Its
agent once kept notes for only 256 connections and gave the oldest
away, so most of them went to the kernel.
"""
import os
import socket
import subprocess
import sys
import zlib

N = int(os.environ.get("LIMIT_N", "960"))


def listen(addr):
    l = socket.socket()
    l.bind((addr, 0))
    l.listen(N)
    # A client that fails must not leave the server waiting for good.
    l.settimeout(60)
    return l


def serve(l):
    late = os.environ.get("LIMIT_LATE_FIFO")
    if late:
        with open(late) as f:
            f.readline()
    conns = [l.accept()[0] for _ in range(N)]
    for s in conns:
        s.sendall(zlib.crc32(s.recv(8, socket.MSG_WAITALL)).to_bytes(4, "little"))
    for s in conns:
        s.recv(1)


def connect(addr, port, soft):
    cs = [socket.create_connection((addr, port)) for _ in range(N)]
    late = os.environ.get("LIMIT_LATE_FIFO")
    if late:
        with open(late, "w") as f:
            f.write("connected\n")
    for i, c in enumerate(cs):
        word = os.urandom(8)
        c.sendall(word)
        if c.recv(4, socket.MSG_WAITALL) != zlib.crc32(word).to_bytes(4, "little"):
            sys.exit(f"limit: connection {i} answered wrong")
    top = max(c.fileno() for c in cs)
    if top >= soft:
        sys.exit(f"limit: a socket at {top}, past the limit of {soft}")
    # Closed before the program below runs: a carried connection closed
    # after a spawn is handed to the kernel first, a different story.
    for c in cs:
        c.close()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    seen = subprocess.run(
        [sys.executable, "-c",
         "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"],
        env=env, capture_output=True, text=True, timeout=30).stdout.strip()
    if seen != str(soft):
        sys.exit(f"limit: a program run without the library saw {seen}, not {soft}")


def main():
    # The limit the shell gave (the library may have raised ours).
    soft = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "fork"
    if mode == "serve":
        l = listen(sys.argv[3])
        print(l.getsockname()[1], flush=True)
        serve(l)
        return
    if mode == "connect":
        connect(sys.argv[3], int(sys.argv[4]), soft)
        return
    l = listen("127.0.0.1")
    port = l.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        serve(l)
        os._exit(0)
    l.close()
    connect("127.0.0.1", port, soft)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit(f"limit: server ended with {status}")


main()
