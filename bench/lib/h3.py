"""A small HTTP/3 client on aioquic: the checks made before each HTTP/3 run (checks.py)
and the idle QUIC connections held to weigh them (idle_conns.py --http3).

It shares no code with kiln (aioquic's QUIC and HTTP/3 layers, pylsqpack for QPACK).
It offers the TLS 1.3 suites in the order oha's rustls does (AES-256-GCM first), so a
check shows which one the server picks for the load client: the other TLS cases are run
with TLS_AES_128_GCM_SHA256 (measure.TLS_CIPHER).
"""

import asyncio
import ssl

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated
from aioquic.tls import CipherSuite

from checks import Response

# The suites oha 1.16's rustls (aws-lc-rs) offers, in its order.
OHA_CIPHER_ORDER = [CipherSuite.AES_256_GCM_SHA384, CipherSuite.AES_128_GCM_SHA256,
                    CipherSuite.CHACHA20_POLY1305_SHA256]
# aioquic's names for the suites, as measure.TLS_CIPHER spells them.
CIPHER_NAMES = {CipherSuite.AES_128_GCM_SHA256: "TLS_AES_128_GCM_SHA256",
                CipherSuite.AES_256_GCM_SHA384: "TLS_AES_256_GCM_SHA384",
                CipherSuite.CHACHA20_POLY1305_SHA256: "TLS_CHACHA20_POLY1305_SHA256"}


class H3Error(Exception):
    """The connection or a request failed; the message says how."""


class Client(QuicConnectionProtocol):
    """One QUIC connection speaking HTTP/3 (aioquic's create_protocol)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        # Stream id -> [headers, body, future of the Response].
        self.pending: dict[int, list] = {}
        # Set once the server ended the connection (or it timed out).
        self.terminated: str | None = None

    def quic_event_received(self, event) -> None:
        if isinstance(event, ConnectionTerminated):
            self.terminated = f"error {event.error_code:#x} {event.reason_phrase}".strip()
            for _, _, future in self.pending.values():
                if not future.done():
                    future.set_exception(H3Error(f"connection ended: {self.terminated}"))
            return
        for h3_event in self.http.handle_event(event):
            entry = self.pending.get(getattr(h3_event, "stream_id", None))
            if entry is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                entry[0].extend(h3_event.headers)
            elif isinstance(h3_event, DataReceived):
                entry[1].extend(h3_event.data)
            if h3_event.stream_ended and not entry[2].done():
                entry[2].set_result(_response(entry[0], bytes(entry[1])))

    async def get(self, authority: str, path: str, headers: dict[str, str],
                  method: str = "GET") -> Response:
        """One request; `authority` as oha sends it (127.0.0.1:PORT): Caddy answers an
        empty 200 to a name its site block does not list."""
        stream_id = self._quic.get_next_available_stream_id()
        future = asyncio.get_running_loop().create_future()
        self.pending[stream_id] = [[], bytearray(), future]
        fields = [(b":method", method.encode()), (b":scheme", b"https"),
                  (b":authority", authority.encode()), (b":path", path.encode()),
                  *((k.lower().encode(), v.encode()) for k, v in headers.items())]
        self.http.send_headers(stream_id, fields, end_stream=True)
        self.transmit()
        try:
            return await future
        finally:
            del self.pending[stream_id]

    def cipher(self) -> str:
        """The TLS 1.3 suite negotiated."""
        suite = self._quic.tls.key_schedule.cipher_suite
        return CIPHER_NAMES.get(suite, str(suite))

    def keep_alive(self) -> None:
        """A PING (ack-eliciting, no HTTP/3 work): the connection stays idle at the HTTP
        layer but does not reach the QUIC idle timeout (Caddy's is quic-go's 30 s)."""
        self._quic.send_ping(0)
        self.transmit()


def _response(fields: list[tuple[bytes, bytes]], body: bytes) -> Response:
    headers: dict[str, list[str]] = {}
    status = 0
    for name, value in fields:
        if name == b":status":
            status = int(value)
        else:
            headers.setdefault(name.decode(), []).append(value.decode(errors="replace"))
    return Response(status, headers, body)


def configuration(idle_timeout_s: float = 60.0) -> QuicConfiguration:
    """HTTP/3, the benchmark's self-signed certificate accepted, oha's suite order."""
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               idle_timeout=idle_timeout_s, server_name="localhost")
    config.verify_mode = ssl.CERT_NONE
    config.cipher_suites = OHA_CIPHER_ORDER
    return config


def get(port: int, method: str, path: str, headers: dict[str, str],
        timeout_s: float) -> tuple[Response, str, int]:
    """One request on a new QUIC connection to 127.0.0.1:`port`; (response, the TLS
    suite negotiated, the server's limit on concurrent request streams). Raises H3Error
    when the handshake or the request fails."""

    async def run() -> tuple[Response, str, int]:
        async with connect("127.0.0.1", port, configuration=configuration(),
                           create_protocol=Client) as client:
            response = await client.get(f"127.0.0.1:{port}", path, headers, method)
            # aioquic keeps the peer's initial_max_streams_bidi (raised by MAX_STREAMS).
            return response, client.cipher(), client._quic._remote_max_streams_bidi

    try:
        return asyncio.run(asyncio.wait_for(run(), timeout_s))
    except asyncio.TimeoutError as err:
        raise H3Error(f"no HTTP/3 answer within {timeout_s:g} s") from err
    except ConnectionError as err:
        raise H3Error(f"QUIC connection failed: {err}") from err
