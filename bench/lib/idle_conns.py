#!/usr/bin/env python3
"""Hold many idle HTTP/1.1 keep-alive connections open to a server (over TLS with --tls;
HTTP/2 over TLS with --http2; HTTP/3 over QUIC with --http3).

Each connection makes one request (so the server has set it up fully), reads the
response, then stays idle. An HTTP/3 connection sends a QUIC PING every
QUIC_PING_INTERVAL_S, no HTTP/3 frame: quic-go (Caddy) ends a QUIC connection after 30 s
without packets, and opening a thousand takes aioquic longer than that on a busy core.
Protocol on stdout/stdin, for bench/lib/measure.py:
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
# QUIC handshakes at the same time (aioquic is slow at them: more only queue up).
QUIC_OPENING_AT_ONCE = 32
# Seconds between the keep-alive PINGs of an idle HTTP/3 connection.
QUIC_PING_INTERVAL_S = 10.0
# HTTP/2: the client preface, an empty SETTINGS frame, and the frame types and flags read.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_DATA, H2_HEADERS, H2_SETTINGS = 0x0, 0x1, 0x4
H2_END_STREAM, H2_ACK = 0x1, 0x1


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


def _h2_request(host: str, path: str) -> bytes:
    """A HEADERS frame on stream 1 (END_STREAM, END_HEADERS) for GET https://host/path,
    HPACK by hand: :method GET and :scheme https from the static table, :authority and
    :path literal (not indexed, no Huffman)."""
    def literal(index: int, value: str) -> bytes:
        data = value.encode()
        if len(data) > 126:
            raise ValueError(f"{value!r}: too long for this encoder")
        return bytes([index, len(data)]) + data

    block = bytes([0x82, 0x87]) + literal(1, host) + literal(4, path)
    return len(block).to_bytes(3, "big") + bytes([H2_HEADERS, 0x5]) + (1).to_bytes(4, "big") \
        + block


async def _h2_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       request: bytes) -> None:
    """Send the preface and the request; read frames, acknowledging the server's
    SETTINGS, until stream 1 ends."""
    writer.write(H2_PREFACE + request)
    while True:
        head = await reader.readexactly(9)
        length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        await reader.readexactly(length)
        if kind == H2_SETTINGS and not flags & H2_ACK:
            writer.write(bytes([0, 0, 0, H2_SETTINGS, H2_ACK, 0, 0, 0, 0]))
        if stream == 1 and kind in (H2_DATA, H2_HEADERS) and flags & H2_END_STREAM:
            return


async def open_h2(host: str, port: int, path: str, gate: asyncio.Semaphore,
                  tls: ssl.SSLContext):
    """Open one HTTP/2 connection (h2 by ALPN) and complete one GET on it; None if that
    fails."""
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls), CONNECT_TIMEOUT_S)
            if writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                writer.close()
                return None
            await asyncio.wait_for(_h2_exchange(reader, writer, _h2_request(host, path)),
                                   CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            return None
        return reader, writer


async def hold_quic(args: argparse.Namespace) -> None:
    """--http3: the same protocol as hold(), over QUIC (h3.py, on aioquic)."""
    import h3
    from aioquic.asyncio.client import connect

    gate = asyncio.Semaphore(QUIC_OPENING_AT_ONCE)
    stop = asyncio.Event()
    held: list[h3.Client] = []
    settled = 0
    all_settled = asyncio.Event()

    def settle() -> None:
        nonlocal settled
        settled += 1
        if settled == args.count:
            all_settled.set()

    async def hold_one() -> None:
        await gate.acquire()
        opening = True
        try:
            async with connect(args.host, args.port, configuration=h3.configuration(),
                               create_protocol=h3.Client) as client:
                await asyncio.wait_for(client.get(f"{args.host}:{args.port}", args.path, {}),
                                       CONNECT_TIMEOUT_S)
                gate.release()
                opening = False
                held.append(client)
                settle()
                while not stop.is_set():
                    try:
                        await asyncio.wait_for(stop.wait(), QUIC_PING_INTERVAL_S)
                    except asyncio.TimeoutError:
                        if client.terminated is None:
                            client.keep_alive()
        except (OSError, ConnectionError, asyncio.TimeoutError, h3.H3Error):
            pass
        finally:
            if opening:
                gate.release()
                settle()

    tasks = [asyncio.create_task(hold_one()) for _ in range(args.count)]
    await all_settled.wait()
    print(f"OPEN {len(held)}", flush=True)
    await _wait_for_check()
    still_open = sum(1 for client in held if client.terminated is None)
    print(f"STILL_OPEN {still_open}", flush=True)
    stop.set()
    await asyncio.gather(*tasks)


async def _wait_for_check() -> None:
    """Wait for the "check" line on stdin while the event loop keeps noticing server
    closes."""
    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    await stdin.readline()


async def hold(args: argparse.Namespace) -> None:
    gate = asyncio.Semaphore(OPENING_AT_ONCE)
    request = f"GET {args.path} HTTP/1.1\r\nHost: {args.host}\r\n\r\n".encode()
    tls = None
    if args.tls or args.http2:
        # The benchmark's certificate is self-signed; what is measured is the server's
        # memory per established session.
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
        if args.http2:
            tls.set_alpn_protocols(["h2"])
    if args.http2:
        opened = await asyncio.gather(
            *(open_h2(args.host, args.port, args.path, gate, tls) for _ in range(args.count)))
    else:
        opened = await asyncio.gather(
            *(open_one(args.host, args.port, request, gate, tls) for _ in range(args.count)))
    held = [pair for pair in opened if pair is not None]
    print(f"OPEN {len(held)}", flush=True)
    await _wait_for_check()
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
    protocol = parser.add_mutually_exclusive_group()
    protocol.add_argument("--tls", action="store_true", help="HTTP/1.1 over TLS")
    protocol.add_argument("--http2", action="store_true", help="HTTP/2 over TLS (h2)")
    protocol.add_argument("--http3", action="store_true", help="HTTP/3 over QUIC")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if args.count + 64 > hard:
        print(f"idle_conns: error: {args.count} connections exceed the fd limit {hard}",
              file=sys.stderr)
        return 2
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(asyncio.wait_for((hold_quic if args.http3 else hold)(args), args.timeout))
    except asyncio.TimeoutError:
        print(f"idle_conns: error: gave up after {args.timeout:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
