#!/usr/bin/env python3
"""HTTP/3 attacks for kiln's tests (`tests/http3_limits.rs`) and for
`bench/h3_attack.sh`, on aioquic's QUIC layer (the helpers of
`h3client.py`). Each command prints one JSON line.

  h3attack.py PORT resets N           one connection: N request streams,
                                      each reset before it carries a byte
                                      (opened as fast as the server gives
                                      stream credit), then a GET of /
                                      that must be answered: the resets
                                      made, the GET's status
  h3attack.py PORT rapid N PATH       one connection: N GETs of PATH, each
                                      cancelled as soon as it is sent
                                      (RESET_STREAM and STOP_SENDING), as
                                      stream credit allows, until the
                                      server ends the connection: the
                                      requests sent, the code the server
                                      closed with (or whether the
                                      connection still answers a GET)
  h3attack.py PORT mild N PATH EVERY  one connection: N GETs of PATH one
                                      after the other, every EVERY-th
                                      cancelled as soon as it is sent:
                                      the answers, the connection's end
  h3attack.py PORT half-open N        N clients, each from its own socket:
                                      an Initial, the Retry answered if
                                      one comes, then silence (the
                                      server's flight never acknowledged):
                                      how many got a Retry, how many an
                                      answer; then waits for a line on
                                      stdin before closing its sockets
  h3attack.py PORT burst N            N connections made at once, each
                                      with one GET of / answered, then
                                      all closed: how many were answered
"""

import asyncio
import json
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import h3client  # noqa: E402
from h3client import control, fields, get, session  # noqa: E402
from aioquic.quic.connection import QuicConnection  # noqa: E402

H3_REQUEST_CANCELLED = 0x10C


def credit(c):
    """Bidirectional streams the server lets this client open in all."""
    return c._quic._remote_max_streams_bidi


def next_index(c):
    return c._quic._local_next_stream_id_bidi // 4


async def more_credit(c, used, timeout=5.0):
    """Waits until the server allows a stream beyond `used` (or ends the
    connection): False if it never does. Looked at every few
    milliseconds: MAX_STREAMS raises no event aioquic hands out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while credit(c) <= used and c.terminated is None:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def answered(c, path="/", timeout=5.0):
    sid = get(c, fields("GET", path))
    await c.until(
        lambda: sid in c.ended or sid in c.resets or c.terminated is not None,
        timeout,
    )
    if sid in c.ended:
        return c.response(sid)[0]
    return None


async def resets(port, n):
    async def go(c):
        control(c)
        made = 0
        while made < n:
            room = min(credit(c) - next_index(c), n - made)
            if room <= 0:
                if not await more_credit(c, next_index(c)):
                    return {"resets": made, "stuck_at_credit": credit(c),
                            "connection_error": c.terminated}
                continue
            for _ in range(room):
                sid = c._quic.get_next_available_stream_id()
                c._quic.reset_stream(sid, H3_REQUEST_CANCELLED)
            c.transmit()
            made += room
        # The last resets' credit comes back before a stream is free for
        # the GET.
        await more_credit(c, next_index(c))
        return {"resets": made, "status": await answered(c),
                "connection_error": c.terminated}
    return await session(port, go)


async def rapid(port, n, path):
    async def go(c):
        control(c)
        sent = 0
        while sent < n and c.terminated is None:
            room = min(credit(c) - next_index(c), n - sent)
            if room <= 0:
                if not await more_credit(c, next_index(c)):
                    break
                continue
            sids = [get(c, fields("GET", path)) for _ in range(room)]
            for sid in sids:
                c._quic.reset_stream(sid, H3_REQUEST_CANCELLED)
                c._quic.stop_stream(sid, H3_REQUEST_CANCELLED)
            c.transmit()
            sent += room
            # Lets the server's answers in between batches.
            await asyncio.sleep(0)
        await c.until(lambda: c.terminated is not None, 3.0)
        result = {"sent": sent, "connection_error": c.terminated}
        if c.terminated is not None:
            # Whether the server's close was seen, or aioquic gave up on a
            # server that had stopped answering (its idle timeout).
            result["reason"] = c._quic._close_event.reason_phrase
        else:
            # No CONNECTION_CLOSE seen: does the connection still serve?
            result["status"] = await answered(c, timeout=3.0)
        return result
    try:
        return await session(port, go)
    except ConnectionError as e:
        return {"failed": str(e)}


async def mild(port, n, path, every):
    async def go(c):
        control(c)
        statuses = {}
        for i in range(n):
            if c.terminated is not None:
                break
            if not await more_credit(c, next_index(c)):
                break
            if i % every == every - 1:
                sid = get(c, fields("GET", path))
                c._quic.reset_stream(sid, H3_REQUEST_CANCELLED)
                c._quic.stop_stream(sid, H3_REQUEST_CANCELLED)
                c.transmit()
                status = "cancelled"
            else:
                status = str(await answered(c, path))
            statuses[status] = statuses.get(status, 0) + 1
        return {"statuses": statuses, "connection_error": c.terminated}
    return await session(port, go)


def half_open(port, n):
    """Returns (retried, answered, sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 256)), hard))
    addr = (h3client.HOST, port)
    sockets, retried, answered_ = [], 0, 0
    for _ in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((h3client.HOST, 0))
        sock.settimeout(3.0)
        sockets.append(sock)
        config = h3client.configuration()
        # As an attacker's: the server's idle timeout is the one that
        # counts, not a short one of the client's.
        config.idle_timeout = 600.0
        conn = QuicConnection(configuration=config)
        conn.connect(addr, now=time.time())
        for attempt in range(2):
            for data, _ in conn.datagrams_to_send(now=time.time()):
                sock.sendto(data, addr)
            try:
                reply, _ = sock.recvfrom(65536)
            except socket.timeout:
                break
            if h3client.packet_kind(reply) != "retry":
                answered_ += 1
                break
            if attempt == 0:
                # The token taken; the second Initial goes out with it.
                conn.receive_datagram(reply, addr, now=time.time())
                retried += 1
    return retried, answered_, sockets


async def burst(port, n):
    async def one():
        try:
            return await session(port, lambda c: answered(c, timeout=10.0))
        except (ConnectionError, asyncio.TimeoutError):
            return None
    statuses = await asyncio.gather(*(one() for _ in range(n)))
    return {"answered": sum(1 for s in statuses if s is not None)}


def main():
    port, cmd, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if cmd == "resets":
        out = asyncio.run(resets(port, int(args[0])))
    elif cmd == "rapid":
        out = asyncio.run(rapid(port, int(args[0]), args[1]))
    elif cmd == "mild":
        out = asyncio.run(mild(port, int(args[0]), args[1], int(args[2])))
    elif cmd == "burst":
        out = asyncio.run(burst(port, int(args[0])))
    elif cmd == "half-open":
        retried, answered_, sockets = half_open(port, int(args[0]))
        print(json.dumps({"clients": len(sockets), "retried": retried,
                          "answered": answered_}), flush=True)
        sys.stdin.readline()
        for sock in sockets:
            sock.close()
        return
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
