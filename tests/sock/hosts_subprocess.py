#!/usr/bin/env python3
"""Python's subprocess on a used connection between hosts, for
tests/sock/hosts.sh: the client uses its connection, then runs `head -c 4`
on it as stdin (Python starts children with vfork, which runs no fork
handler) while the server's next 4 bytes wait unread, then `printf wxyz`
on it as stdout; the server must get those 4 bytes. Under viarun the
children's first calls ask the client's library to hand the connection
back to the kernel while Python waits for them.

  hosts_subprocess.py server ADDR      (prints its port: the readiness signal)
  hosts_subprocess.py client ADDR PORT
"""
import socket
import subprocess
import sys


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
        server(sys.argv[2])
    else:
        client(sys.argv[2], int(sys.argv[3]))
