#!/usr/bin/env python3
"""Opens N idle keep-alive connections to HOST:PORT (each answers one request
first, so the server has really set it up), holds them for SECONDS, and
prints the server's RSS before and after when given its PID.

usage: idle_connections.py PORT N SECONDS [PID]"""
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    pid = int(sys.argv[4]) if len(sys.argv) > 4 else None
    before = rss_kib(pid) if pid else 0
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /index.txt HTTP/1.1\r\nHost: b\r\n\r\n")
        conns.append(s)
    for s in conns:
        got = b""
        while not got.endswith(b"Hello World!"):
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("connection closed early")
            got += chunk
    time.sleep(hold)
    if pid:
        after = rss_kib(pid)
        print(f"RSS before {before} KiB, with {n} idle connections {after} KiB, "
              f"{(after - before) * 1024 / n:.0f} bytes per connection")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
