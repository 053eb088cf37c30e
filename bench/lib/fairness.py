"""Small requests beside bulk downloads that are never read.

fairness.py HOST PORT BULK_PATH SMALL_PATH [--tls] [--bulk 200] [--rounds 3]
            [--probes 150] [--interval 0.005]

Each round, a helper process opens BULK connections, then asks for
BULK_PATH on each at once and never reads; meanwhile SMALL_PATH is asked
for on a new connection every INTERVAL seconds (connect, request, whole
response; with --request-only, from the request on); after PROBES probes
the bulk connections are closed. Prints one JSON
object: the probes' latencies (ms), p50, p99, max, and failures.
"""

import argparse
import json
import socket
import ssl
import multiprocessing
import time


def connect(host, port, tls):
    s = socket.create_connection((host, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        s = ctx.wrap_socket(s, server_hostname="localhost")
    return s


def small_request(host, port, path, tls, request_only):
    start = time.perf_counter()
    s = connect(host, port, tls)
    if request_only:
        start = time.perf_counter()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(data[:80])
    return (time.perf_counter() - start) * 1000


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def hold_bulk(a, connected, done):
    """Opens the bulk connections (through the handshake over TLS), then
    sends every request at once and holds the connections unread."""
    conns = [connect(a.host, a.port, a.tls) for _ in range(a.bulk)]
    connected.set()
    request = f"GET {a.bulk_path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    for s in conns:
        s.sendall(request)
    done.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("bulk_path")
    ap.add_argument("small_path")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--bulk", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", type=int, default=150)
    ap.add_argument("--interval", type=float, default=0.005)
    ap.add_argument("--request-only", action="store_true",
                    help="time from the request on (the connection and its TLS handshake "
                    "made before the clock starts): the server's part, not the client's")
    a = ap.parse_args()
    latencies, failures = [], 0
    for _ in range(a.rounds):
        # The bulk clients in a process of their own, so that the probes'
        # timing does not wait for the interpreter lock.
        connected, done = multiprocessing.Event(), multiprocessing.Event()
        holder = multiprocessing.Process(target=hold_bulk, args=(a, connected, done))
        holder.start()
        connected.wait(120)
        for _ in range(a.probes):
            try:
                latencies.append(
                    small_request(a.host, a.port, a.small_path, a.tls, a.request_only))
            except Exception:
                failures += 1
            time.sleep(a.interval)
        done.set()
        holder.join(60)
        time.sleep(0.5)
    ordered = sorted(latencies)
    print(json.dumps({
        "probes": len(latencies),
        "failures": failures,
        "p50_ms": round(percentile(ordered, 50), 2) if ordered else None,
        "p99_ms": round(percentile(ordered, 99), 2) if ordered else None,
        "max_ms": round(ordered[-1], 2) if ordered else None,
    }))


if __name__ == "__main__":
    main()
