#!/usr/bin/env python3
"""An HTTP/3 client for kiln's tests, on aioquic's QUIC layer, so that it
can send what a correct HTTP/3 stack never would (h3spec-style cases).

  h3client.py PORT [--host IP] COMMAND   the server at IP (127.0.0.1 by
                                      default) for the commands that
                                      connect with aioquic's client
  h3client.py PORT cases NAME...      one JSON line per case: what the
                                      server did (connection or stream
                                      error code, or the response status)
  h3client.py PORT get PATH [--method M] [--header 'name: value']...
                     [--authority HOST] [--wait SECONDS]
                                      one JSON line: status, fields, body
  h3client.py PORT gets JSON          `get` for each [method, path,
                                      [header...]] of the JSON list, each
                                      on a connection of its own: one line
                                      each
                                      one JSON line: status, fields, body
  h3client.py PORT many N PATH [--authority HOST]
                                      N GETs of PATH at once on one
                                      connection: one JSON line with each
                                      status and the SHA-256 of each body
  h3client.py PORT retry STEP...      one client per step, one JSON line
                                      each: a GET's status (or the
                                      connection error), the Retry packets
                                      the client took and the token it sent
                                      after. STEP: `new`; `forged` (its
                                      first Initial carries a token not the
                                      server's); `replayed` (the token the
                                      previous client got, from a new port);
                                      `half-open:N` (N handshakes begun from
                                      another socket and left so, then a
                                      `new` client)
  h3client.py PORT session            one connection; a GET of each path
                                      read from stdin, one JSON line each:
                                      status, body (text), the frame types
                                      on the server's control stream so far
  h3client.py PORT ids                a GET answered, then the connection
                                      closed: one JSON line with the
                                      connection IDs the server issued and
                                      not used yet, each with its
                                      stateless-reset token
  h3client.py PORT held-retry         one client whose handshake waits after
                                      the server's Retry: one JSON line (its
                                      address, original destination ID, the
                                      token), then a line read from stdin (a
                                      token in hex to send instead, or
                                      nothing) before it goes on (the server
                                      may have been restarted meanwhile): one
                                      JSON line, the kind of the server's
                                      first answer and, unless a Retry, the
                                      GET's status or the connection error
  h3client.py PORT events N PATH      a GET of PATH held open (an event
                                      stream): one JSON line with the
                                      status, fields and first event once
                                      it arrives, then one per event (the
                                      comments left out) until N, then
                                      `{"ended": true}` once the server ends
                                      the stream or the connection (or
                                      `{"timeout": true}` after 20 s)
  h3client.py PORT hold               a GET answered, then `{"ready": true}`;
                                      then, once the server ends the
                                      connection (or after 10 s), the frames
                                      of its control stream and the code
"""

import argparse
import asyncio
import json
import ssl
import sys

import pylsqpack
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    StreamDataReceived,
    StreamReset,
)


def varint(v):
    if v < 0x40:
        return bytes([v])
    if v < 0x4000:
        return (v | 0x4000).to_bytes(2, "big")
    if v < 0x40000000:
        return (v | 0x80000000).to_bytes(4, "big")
    return (v | 0xC000000000000000).to_bytes(8, "big")


def read_varint(b, i):
    n = 1 << (b[i] >> 6)
    v = b[i] & 0x3F
    for k in range(1, n):
        v = (v << 8) | b[i + k]
    return v, i + n


def frame(t, payload=b""):
    return varint(t) + varint(len(payload)) + payload


DATA, HEADERS, SETTINGS, GOAWAY = 0x0, 0x1, 0x4, 0x7
SETTINGS_EMPTY = frame(SETTINGS)


def fields(method="GET", path="/", extra=(), authority="localhost"):
    out = [(b":method", method.encode()), (b":scheme", b"https")]
    if authority is not None:
        out.append((b":authority", authority.encode()))
    if path is not None:
        out.append((b":path", path.encode()))
    out.extend((k.encode(), v.encode()) for k, v in extra)
    return out


def section(headers):
    encoder = pylsqpack.Encoder()
    _, block = encoder.encode(0, headers)
    return block


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.terminated = None
        self.resets = {}
        self.data = {}
        self.ended = set()
        self.changed = asyncio.Event()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = event.error_code
        elif isinstance(event, StreamReset):
            self.resets[event.stream_id] = event.error_code
        elif isinstance(event, StreamDataReceived):
            self.data.setdefault(event.stream_id, bytearray()).extend(event.data)
            if event.end_stream:
                self.ended.add(event.stream_id)
        self.changed.set()

    def uni(self, data, end=False):
        sid = self._quic.get_next_available_stream_id(is_unidirectional=True)
        self._quic.send_stream_data(sid, data, end)
        self.transmit()
        return sid

    def request(self, data, end=True):
        sid = self._quic.get_next_available_stream_id()
        self._quic.send_stream_data(sid, data, end)
        self.transmit()
        return sid

    async def until(self, done, timeout=3.0):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            self.changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return done()
        return True

    def response(self, sid):
        """(status, [(name, value)], body) of a whole response on sid."""
        raw = bytes(self.data.get(sid, b""))
        decoder = pylsqpack.Decoder(0, 0)
        i, status, headers, body = 0, None, [], bytearray()
        while i < len(raw):
            t, i = read_varint(raw, i)
            n, i = read_varint(raw, i)
            payload = raw[i : i + n]
            i += n
            if t == HEADERS and status is None:
                _, hs = decoder.feed_header(sid, payload)
                for k, v in hs:
                    if k == b":status":
                        status = int(v)
                    else:
                        headers.append((k.decode(), v.decode()))
            elif t == DATA:
                body.extend(payload)
        return status, headers, bytes(body)


# Where the server is (`--host`): 127.0.0.1 unless told.
HOST = "127.0.0.1"


def configuration(token=b""):
    config = QuicConfiguration(is_client=True, alpn_protocols=["h3"])
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    # A server that does not answer is given up on after this long.
    config.idle_timeout = 5.0
    config.token = token
    return config


async def session(port, fn, token=b"", wait_connected=True):
    async with connect(
        HOST, port, configuration=configuration(token), create_protocol=Client,
        wait_connected=wait_connected,
    ) as client:
        return await fn(client)


async def outcome(c, sid=None, timeout=3.0):
    """What the server did: a connection error, a stream error on sid, or
    the response's status."""
    def done():
        return (
            c.terminated is not None
            or (sid is not None and (sid in c.resets or sid in c.ended))
        )
    await c.until(done, timeout)
    if c.terminated is not None:
        return {"connection_error": c.terminated}
    if sid is not None and sid in c.resets:
        return {"stream_error": c.resets[sid]}
    if sid is not None and sid in c.ended:
        return {"status": c.response(sid)[0]}
    return {"nothing": True}


def control(c, *frames_):
    return c.uni(varint(0x00) + SETTINGS_EMPTY + b"".join(frames_))


def get(c, headers=None, end=True, extra=b""):
    block = section(headers if headers is not None else fields())
    return c.request(frame(HEADERS, block) + extra, end)


# Each case: what it sends; the test asserts the outcome.
async def case(c, name):
    if name == "unknown_frames_and_streams_ignored":
        control(c, frame(0x21, b"xyz"), frame(0x1F * 3 + 0x21, b""))
        c.uni(varint(0x21) + b"anything")
        c.uni(varint(0x1F * 5 + 0x21) + b"reserved")
        sid = get(c, extra=b"")
        return await outcome(c, sid)
    if name == "unknown_frame_on_request_stream":
        block = section(fields())
        sid = c.request(frame(0x21, b"ab") + frame(HEADERS, block) + frame(0x1F * 2 + 0x21))
        return await outcome(c, sid)
    if name == "data_before_headers":
        control(c)
        sid = c.request(frame(DATA, b"x"))
        return await outcome(c, sid)
    if name == "settings_on_request_stream":
        control(c)
        sid = c.request(frame(SETTINGS) + frame(HEADERS, section(fields())))
        return await outcome(c, sid)
    if name == "goaway_on_request_stream":
        control(c)
        sid = c.request(frame(HEADERS, section(fields())) + frame(GOAWAY, varint(0)), end=False)
        return await outcome(c, None)
    for http2_type in (0x02, 0x06, 0x08, 0x09):
        if name == f"http2_frame_{http2_type:#x}_on_control_stream":
            control(c, frame(http2_type, b"\x00"))
            return await outcome(c)
        if name == f"http2_frame_{http2_type:#x}_on_request_stream":
            control(c)
            sid = c.request(frame(http2_type, b"\x00") + frame(HEADERS, section(fields())))
            return await outcome(c, sid)
    for setting in (0x02, 0x03, 0x04, 0x05):
        if name == f"http2_setting_{setting:#x}":
            c.uni(varint(0x00) + frame(SETTINGS, varint(setting) + varint(0)))
            return await outcome(c)
    if name == "repeated_setting":
        c.uni(varint(0x00) + frame(SETTINGS, varint(0x06) + varint(1) + varint(0x06) + varint(2)))
        return await outcome(c)
    if name == "second_settings":
        control(c, SETTINGS_EMPTY)
        return await outcome(c)
    if name == "second_control_stream":
        control(c)
        control(c)
        return await outcome(c)
    if name == "control_stream_closed":
        c.uni(varint(0x00) + SETTINGS_EMPTY, end=True)
        return await outcome(c)
    if name == "control_stream_without_settings":
        c.uni(varint(0x00) + frame(GOAWAY, varint(0)))
        return await outcome(c)
    if name == "data_on_control_stream":
        control(c, frame(DATA, b"x"))
        return await outcome(c)
    if name == "headers_on_control_stream":
        control(c, frame(HEADERS, section(fields())))
        return await outcome(c)
    if name == "push_stream_from_client":
        control(c)
        c.uni(varint(0x01) + varint(0))
        return await outcome(c)
    if name == "second_qpack_encoder_stream":
        control(c)
        c.uni(varint(0x02))
        c.uni(varint(0x02))
        return await outcome(c)
    if name == "qpack_insert_into_a_table_of_capacity_0":
        control(c)
        c.uni(varint(0x02) + bytes([0x3F, 0xE1, 0x1F]))
        return await outcome(c)
    if name == "qpack_dynamic_reference":
        control(c)
        # Required Insert Count 1: a table the server said it has not.
        sid = c.request(frame(HEADERS, bytes([0x02, 0x00, 0x80])))
        return await outcome(c, sid)
    bad_fields = {
        "no_method": fields()[1:],
        "no_path": fields(path=None),
        "empty_path": fields(path=""),
        "repeated_pseudo_header": fields() + [(b":path", b"/")],
        "response_pseudo_header": fields() + [(b":status", b"200")],
        "pseudo_header_after_regular": [(b"accept", b"*/*")] + fields(),
        "upper_case_name": fields(extra=[("Accept", "*/*")]),
        "connection_specific_field": fields(extra=[("connection", "keep-alive")]),
        "transfer_encoding_field": fields(extra=[("transfer-encoding", "chunked")]),
        "te_other_than_trailers": fields(extra=[("te", "gzip")]),
    }
    if name in bad_fields:
        control(c)
        sid = get(c, bad_fields[name])
        return await outcome(c, sid)
    if name == "content_length_mismatch":
        control(c)
        sid = get(c, fields("POST", extra=[("content-length", "5")]), extra=frame(DATA, b"abc"))
        return await outcome(c, sid)
    if name == "trailers_with_pseudo_header":
        control(c)
        trailers = section([(b":path", b"/")])
        sid = get(c, end=True, extra=frame(HEADERS, trailers))
        return await outcome(c, sid)
    if name == "data_after_trailers":
        control(c)
        trailers = section([(b"x-t", b"1")])
        sid = get(c, fields("POST"), extra=frame(HEADERS, trailers) + frame(DATA, b"x"))
        return await outcome(c, sid)
    if name == "request_stream_ended_early":
        control(c)
        sid = c.request(b"", end=True)
        return await outcome(c, sid)
    raise SystemExit(f"unknown case {name}")


async def run_case(port, name):
    try:
        return await session(port, lambda c: case(c, name))
    except ConnectionError as e:
        return {"failed": str(e)}


async def fetch(port, path, method, headers, authority, wait=3.0):
    async def go(c):
        control(c)
        extra = [tuple(h.split(": ", 1)) for h in headers]
        sid = get(c, fields(method, path, extra, authority))
        ok = await c.until(
            lambda: sid in c.ended or sid in c.resets or c.terminated is not None, wait)
        if not ok or sid not in c.ended:
            return {"failed": "no response", "resets": c.resets, "terminated": c.terminated}
        status, hs, body = c.response(sid)
        return {"status": status, "headers": hs, "body": body.hex()}
    return await session(port, go)


def control_frames(raw):
    """The frame types on a server's control stream (after its type)."""
    types, i = [], 1
    while i < len(raw):
        t, i = read_varint(raw, i)
        n, i = read_varint(raw, i)
        types.append(t)
        i += n
    return types


async def hold(port):
    async def go(c):
        control(c)
        sid = get(c)
        await c.until(lambda: sid in c.ended)
        print(json.dumps({"ready": True, "status": c.response(sid)[0]}), flush=True)
        await c.until(lambda: c.terminated is not None, timeout=10.0)
        return {
            "control_frames": control_frames(bytes(c.data.get(3, b""))),
            "connection_error": c.terminated,
        }
    return await session(port, go)


async def events(port, n, path):
    async def go(c):
        control(c)
        sid = get(c, fields("GET", path))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20.0
        seen = 0

        def ended():
            return sid in c.ended or sid in c.resets or c.terminated is not None

        def all_events():
            status, hs, body = c.response(sid)
            return status, hs, [e for e in body.decode().split("\n\n")[:-1] if not e.startswith(":")]

        while True:
            status, hs, got = all_events()
            for event in got[seen:]:
                line = {"event": event}
                if seen == 0:
                    line.update(status=status, headers=hs)
                print(json.dumps(line), flush=True)
                seen += 1
            if seen >= n and ended():
                return {"ended": True}
            if ended() and not all_events()[2][seen:]:
                return {"ended": True, "events": seen}
            left = deadline - loop.time()
            if left <= 0:
                return {"timeout": True}
            await c.until(lambda: ended() or len(all_events()[2]) > seen, left)
    return await session(port, go)


async def many(port, n, path, authority):
    async def go(c):
        control(c)
        sids = [get(c, fields("GET", path, authority=authority)) for _ in range(n)]
        await c.until(lambda: all(s in c.ended for s in sids), timeout=20.0)
        import hashlib
        out = []
        for s in sids:
            status, _, body = c.response(s) if s in c.ended else (None, [], b"")
            out.append([status, hashlib.sha256(body).hexdigest()])
        return {"responses": out}
    return await session(port, go)


def half_open(port, n):
    """n handshakes begun (each client's first Initial sent) and never
    continued: the socket is returned, to keep until the end."""
    import socket
    import time
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = ("127.0.0.1", port)
    for _ in range(n):
        conn = QuicConnection(configuration=configuration())
        conn.connect(addr, now=time.time())
        for data, _ in conn.datagrams_to_send(now=time.time()):
            sock.sendto(data, addr)
    return sock


async def retry(port, steps):
    held, previous = [], {}
    for step in steps:
        token = b""
        if step == "forged":
            token = bytes(range(40))
        elif step == "replayed":
            token = bytes.fromhex(previous["token"])
        elif step.startswith("half-open:"):
            # Sent first: with one server thread they are in its socket's
            # queue ahead of this client's Initial.
            held.append(half_open(port, int(step.split(":")[1])))
        elif step != "new":
            raise SystemExit(f"unknown step {step}")
        previous = await retry_one(port, token)
        print(json.dumps({"step": step, **previous}), flush=True)
    for sock in held:
        sock.close()


async def retry_one(port, token):
    async def go(c):
        control(c)
        sid = get(c)
        await c.until(lambda: sid in c.ended or c.terminated is not None, timeout=5.0)
        result = {
            "retries": c._quic._retry_count,
            "token": c._quic._peer_token.hex(),
        }
        if c.terminated is not None:
            result["connection_error"] = c.terminated
        else:
            result["status"] = c.response(sid)[0]
        return result

    return await session(port, go, token=token, wait_connected=False)


def packet_kind(datagram):
    """The type of a datagram's first packet, read from its first byte."""
    if not datagram[0] & 0x80:
        return "short"
    return ("initial", "0-rtt", "handshake", "retry")[(datagram[0] >> 4) & 3]


async def held_retry(port):
    import socket
    loop = asyncio.get_running_loop()
    addr = ("127.0.0.1", port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3.0)

    def exchange(conn):
        for data, _ in conn.datagrams_to_send(now=loop.time()):
            sock.sendto(data, addr)
        reply, _ = sock.recvfrom(65536)
        return reply

    conn = QuicConnection(configuration=configuration())
    conn.connect(addr, now=loop.time())
    odcid = conn.original_destination_connection_id
    reply = exchange(conn)
    if packet_kind(reply) != "retry":
        return {"first_reply": packet_kind(reply)}
    conn.receive_datagram(reply, addr, now=loop.time())
    print(json.dumps({
        "address": "%s:%d" % sock.getsockname(),
        "odcid": odcid.hex(),
        "token": conn._peer_token.hex(),
    }), flush=True)
    token = sys.stdin.readline().strip()
    if token:
        conn._peer_token = bytes.fromhex(token)
    reply = exchange(conn)
    result = {"first_reply": packet_kind(reply)}
    if result["first_reply"] == "retry":
        return result
    sock.setblocking(False)
    transport, c = await loop.create_datagram_endpoint(lambda: Client(conn), sock=sock)
    c.datagram_received(reply, addr)
    control(c)
    sid = get(c)
    await c.until(lambda: sid in c.ended or c.terminated is not None, timeout=5.0)
    if c.terminated is not None:
        result["connection_error"] = c.terminated
    else:
        result["status"] = c.response(sid)[0]
    c.close()
    transport.close()
    return result


async def gets_from_stdin(port):
    async def go(c):
        control(c)
        loop = asyncio.get_running_loop()
        while path := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            sid = get(c, fields("GET", path))
            await c.until(lambda: sid in c.ended or c.terminated is not None, timeout=5.0)
            status, _, body = c.response(sid)
            print(json.dumps({
                "status": status,
                "body": body.decode(errors="replace"),
                "control_frames": control_frames(bytes(c.data.get(3, b""))),
            }), flush=True)
    await session(port, go)


async def issued_ids(port):
    async def go(c):
        control(c)
        sid = get(c)
        await c.until(lambda: sid in c.ended)
        return {
            "status": c.response(sid)[0],
            "ids": [
                [cid.cid.hex(), cid.stateless_reset_token.hex()]
                for cid in c._quic._peer_cid_available
            ],
        }
    return await session(port, go)


def main():
    global HOST
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--host", default=HOST)
    sub = p.add_subparsers(dest="cmd", required=True)
    pc = sub.add_parser("cases")
    pc.add_argument("names", nargs="+")
    pg = sub.add_parser("get")
    pg.add_argument("path")
    pg.add_argument("--method", default="GET")
    pg.add_argument("--header", action="append", default=[])
    pg.add_argument("--authority", default="localhost")
    pg.add_argument("--wait", type=float, default=3.0)
    pgs = sub.add_parser("gets")
    pgs.add_argument("requests")
    sub.add_parser("hold")
    pe = sub.add_parser("events")
    pe.add_argument("n", type=int)
    pe.add_argument("path")
    sub.add_parser("session")
    sub.add_parser("ids")
    sub.add_parser("held-retry")
    pr = sub.add_parser("retry")
    pr.add_argument("steps", nargs="+")
    pm = sub.add_parser("many")
    pm.add_argument("n", type=int)
    pm.add_argument("path")
    pm.add_argument("--authority", default="localhost")
    a = p.parse_args()
    HOST = a.host
    if a.cmd == "many":
        print(json.dumps(asyncio.run(many(a.port, a.n, a.path, a.authority))))
    elif a.cmd == "retry":
        asyncio.run(retry(a.port, a.steps))
    elif a.cmd == "gets":
        for method, path, headers in json.loads(a.requests):
            answer = asyncio.run(fetch(a.port, path, method, headers, "localhost"))
            print(json.dumps(answer), flush=True)
    elif a.cmd == "held-retry":
        print(json.dumps(asyncio.run(held_retry(a.port))))
    elif a.cmd == "ids":
        print(json.dumps(asyncio.run(issued_ids(a.port))))
    elif a.cmd == "session":
        asyncio.run(gets_from_stdin(a.port))
    elif a.cmd == "events":
        print(json.dumps(asyncio.run(events(a.port, a.n, a.path))), flush=True)
    elif a.cmd == "hold":
        print(json.dumps(asyncio.run(hold(a.port))))
    elif a.cmd == "cases":
        for name in a.names:
            result = asyncio.run(run_case(a.port, name))
            print(json.dumps({"case": name, **result}), flush=True)
    else:
        print(json.dumps(asyncio.run(fetch(a.port, a.path, a.method, a.header, a.authority, a.wait))))


if __name__ == "__main__":
    sys.exit(main())
