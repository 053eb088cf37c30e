#!/usr/bin/env python3
"""Hold many idle HTTP/1.1 keep-alive connections open to a server (over TLS with --tls).

Each connection makes one request (so the server has set it up fully), reads the
response, then stays idle. Protocol on stdout/stdin, for bench/lib/measure.py:
  prints `OPEN n` once n connections are held; then, on any line on stdin, prints
  `STILL_OPEN m` (those the server has not closed) and exits.
Bounded: the process exits by itself after --timeout seconds whatever happens.
"""

import argparse
import asyncio
import resource
import ssl
import sys

# Connections being opened at the same time: more would overflow the listen backlog.
OPENING_AT_ONCE = 256
# Time allowed for one connection to open and get its response.
CONNECT_TIMEOUT_S = 10.0


async def open_one(host: str, port: int, request: bytes, gate: asyncio.Semaphore,
                   tls: ssl.SSLContext | None):
    """Open one connection and complete one request on it; None if that fails."""
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls), CONNECT_TIMEOUT_S)
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        try:
            await asyncio.wait_for(reader.readexactly(length), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            writer.close()
            return None
        return reader, writer


async def hold(args: argparse.Namespace) -> None:
    gate = asyncio.Semaphore(OPENING_AT_ONCE)
    request = f"GET {args.path} HTTP/1.1\r\nHost: {args.host}\r\n\r\n".encode()
    tls = None
    if args.tls:
        # The benchmark's certificate is self-signed; what is measured is the server's
        # memory per established session.
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    opened = await asyncio.gather(
        *(open_one(args.host, args.port, request, gate, tls) for _ in range(args.count)))
    held = [pair for pair in opened if pair is not None]
    print(f"OPEN {len(held)}", flush=True)
    # Wait for the "check" line while the event loop keeps noticing server closes.
    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    await stdin.readline()
    still_open = sum(1 for reader, _ in held if not reader.at_eof())
    print(f"STILL_OPEN {still_open}", flush=True)
    for _, writer in held:
        writer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--path", default="/", help="path requested on each connection")
    parser.add_argument("--timeout", type=float, default=300.0, help="exit after seconds")
    parser.add_argument("--tls", action="store_true", help="connect with TLS")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if args.count + 64 > hard:
        print(f"idle_conns: error: {args.count} connections exceed the fd limit {hard}",
              file=sys.stderr)
        return 2
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(asyncio.wait_for(hold(args), args.timeout))
    except asyncio.TimeoutError:
        print(f"idle_conns: error: gave up after {args.timeout:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
