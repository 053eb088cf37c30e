"""Checks made before each measured run: the server must answer right, or it is not timed.

Fixed-path cases check status, body and length; random-path cases fetch a fixed sample
of the corpus with the case's Accept-Encoding, decode the body and compare it with the
file on disk, so a server that answers fast but wrong cannot score.

HTTP/2 cases make the same checks over HTTP/2 (curl, one process per request) and fail
when a response comes over HTTP/1.1; they also read the server's SETTINGS (nghttp) so
that a server allowing fewer concurrent streams than the case opens fails too, rather
than being measured under a lighter load than the others. HTTP/3 cases make them over
HTTP/3 (h3.py, aioquic), with the QUIC stream limit and the TLS suite checked.
"""

import gzip
import http.client
import json
import re
import ssl
import subprocess
from pathlib import Path
from urllib.parse import unquote

import measure
from corpora import Corpus, sample_paths

# Paths checked per random-path case, and the seed that picks them.
SAMPLE_SIZE = 25
SAMPLE_SEED = 7
# Longest wait for one curl or nghttp exchange.
HTTP2_TIMEOUT_S = 10
# The first SETTINGS frame nghttp -v shows from the server (flags 0x00: not the ACK),
# with its parameter lines, and the concurrent-streams parameter among them.
NGHTTP_SETTINGS = re.compile(r"recv SETTINGS frame <[^>]*flags=0x00[^>]*>\n((?:[ \t]+\S.*\n)*)")
MAX_STREAMS = re.compile(r"SETTINGS_MAX_CONCURRENT_STREAMS\(0x03\):(\d+)")


def _brotli_decompress(body: bytes) -> bytes:
    # Imported on use: bench/run pip-installs Brotli after this module is loaded.
    import brotli

    return brotli.decompress(body)


# Content-Encoding -> how to get the file's bytes back.
DECODERS = {"identity": lambda body: body, "gzip": gzip.decompress, "br": _brotli_decompress}


class CheckError(Exception):
    """A response was wrong; the message names the path and what was wrong."""


class Response:
    """What _Http2Connection (or h3.get) received: http.client.HTTPResponse's part used
    here."""

    def __init__(self, status: int, headers: dict[str, list[str]], body: bytes):
        self.status = status
        # Lower-case name -> values, as curl's %{header_json} gives them (h3.py: the same).
        self.headers = headers
        self.body = body

    def read(self) -> bytes:
        return self.body

    def getheader(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return ", ".join(values) if values else None


class _Http2Connection:
    """http.client.HTTPConnection's part used here, over HTTP/2: curl with prior knowledge
    (h2c), or offering h2 by ALPN over TLS 1.3. Each request is a new curl process, and a
    response that came over HTTP/1.1 (a server that did not speak HTTP/2) is an error."""

    def __init__(self, port: int, tls: bool):
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self.options = (["--http2", "--tlsv1.3", "--insecure"] if tls
                        else ["--http2-prior-knowledge"])
        self.response: Response | None = None

    def request(self, method: str, path: str, headers: dict[str, str]) -> None:
        argv = ["curl", "--silent", "--show-error", "--max-time", str(HTTP2_TIMEOUT_S),
                "--request", method, *self.options,
                "--write-out", "%{stderr}%{http_version} %{response_code}\n%{header_json}"]
        for name, value in headers.items():
            argv += ["--header", f"{name}: {value}"]
        # The body goes to stdout as received (no --compressed: the checks decode it).
        done = subprocess.run(argv + [self.base + path], capture_output=True,
                              timeout=HTTP2_TIMEOUT_S + 5)
        report = done.stderr.decode(errors="replace")
        if done.returncode != 0:
            # curl's message comes first, then the --write-out text.
            message = (report.strip() or "no message").splitlines()[0]
            raise CheckError(f"{path}: curl {' '.join(self.options)} failed (status "
                             f"{done.returncode}): {message}")
        version, status = report.split("\n", 1)[0].split()
        if version != "2":
            raise CheckError(f"{path}: answered over HTTP/{version}, not HTTP/2")
        self.response = Response(int(status), json.loads(report.split("\n", 1)[1]),
                                       done.stdout)

    def getresponse(self) -> Response:
        return self.response

    def close(self) -> None:
        """Nothing to close: each request had its own curl process."""


class _Http3Connection:
    """_Http2Connection's interface over HTTP/3 (h3.py, on aioquic): a new QUIC
    connection per request. Keeps the TLS suite and the stream limit the server gave."""

    def __init__(self, port: int):
        self.port = port
        self.response = None
        # What the last connection negotiated: the TLS 1.3 suite, the peer's limit on
        # concurrent request streams (its initial_max_streams_bidi).
        self.cipher: str | None = None
        self.max_streams: int | None = None

    def request(self, method: str, path: str, headers: dict[str, str]) -> None:
        # Imported on use: bench/run pip-installs aioquic after this module is loaded.
        import h3

        try:
            self.response, self.cipher, self.max_streams = h3.get(
                self.port, method, path, headers, HTTP2_TIMEOUT_S)
        except h3.H3Error as err:
            raise CheckError(f"{path}: HTTP/3: {err}") from err

    def getresponse(self):
        return self.response

    def close(self) -> None:
        """Nothing to close: each request had its own QUIC connection."""


def _max_concurrent_streams(port: int, tls: bool, path: str) -> int | None:
    """SETTINGS_MAX_CONCURRENT_STREAMS of the server's SETTINGS (None: not sent, so no
    limit), as nghttp -v shows it on a GET of `path` (h2c by prior knowledge, or h2 by
    ALPN; nghttp speaks nothing else)."""
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}"
    try:
        done = subprocess.run(["nghttp", "--null-out", "--verbose",
                               f"--timeout={HTTP2_TIMEOUT_S}", url],
                              capture_output=True, text=True, timeout=HTTP2_TIMEOUT_S + 5)
    except subprocess.TimeoutExpired as err:
        raise CheckError(f"nghttp {url}: no answer within {err.timeout} s") from err
    settings = NGHTTP_SETTINGS.search(done.stdout)
    if done.returncode != 0 or settings is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CheckError(f"nghttp {url} (status {done.returncode}), no SETTINGS from the "
                         f"server: {' / '.join(tail)}")
    limit = MAX_STREAMS.search(settings.group(1))
    return int(limit.group(1)) if limit else None


def _get(conn: http.client.HTTPConnection | _Http2Connection, path: str,
         headers: dict[str, str]):
    """GET `path`; return (status, headers, body), requiring an exact Content-Length."""
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    length = response.getheader("Content-Length")
    if length is None or int(length) != len(body):
        raise CheckError(f"{path}: Content-Length {length}, body of {len(body)} bytes")
    return response.status, response, body


def _expect(conn, path: str, status: int, body: bytes | None, content_type: str | None):
    got_status, response, got_body = _get(conn, path, {})
    if got_status != status:
        raise CheckError(f"{path}: status {got_status}, expected {status}")
    if body is not None and got_body != body:
        raise CheckError(f"{path}: body {got_body[:40]!r}, expected {body[:40]!r}")
    got_type = response.getheader("Content-Type") or ""
    if content_type is not None and not got_type.startswith(content_type):
        raise CheckError(f"{path}: Content-Type {got_type!r}, expected {content_type}")


def _check_sample(conn, corpus: Corpus, accept_encoding: str | None) -> dict[str, int]:
    """Fetch the sample; return how many responses came in each Content-Encoding."""
    headers = {"Accept-Encoding": accept_encoding or "identity"}
    allowed = {"identity"} | {e.strip() for e in (accept_encoding or "").split(",")}
    encodings: dict[str, int] = {}
    for path in sample_paths(corpus, SAMPLE_SIZE, SAMPLE_SEED):
        status, response, body = _get(conn, path, headers)
        if status != 200:
            raise CheckError(f"{path}: status {status}, expected 200")
        encoding = response.getheader("Content-Encoding") or "identity"
        if encoding not in allowed or encoding not in DECODERS:
            raise CheckError(f"{path}: Content-Encoding {encoding} not asked for")
        expected = Path(corpus.kiln_source, unquote(path).lstrip("/")).read_bytes()
        if DECODERS[encoding](body) != expected:
            raise CheckError(f"{path}: {encoding} body does not match the file")
        encodings[encoding] = encodings.get(encoding, 0) + 1
    return encodings


def tls_parameters(port: int, env: dict[str, str]) -> dict[str, str]:
    """The TLS version, cipher and key-exchange group the server negotiates with an OpenSSL
    client in the load clients' environment `env` (measure.client_env); raise CheckError
    unless they are TLS 1.3, measure.TLS_CIPHER and measure.TLS_GROUP."""
    try:
        done = subprocess.run(["openssl", "s_client", "-brief", "-connect", f"127.0.0.1:{port}"],
                              input="", capture_output=True, text=True, env=env,
                              timeout=HTTP2_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise CheckError(f"openssl s_client: no handshake within {err.timeout} s") from err
    # -brief prints its summary on stderr: "Protocol version: TLSv1.3", "Ciphersuite:
    # TLS_AES_128_GCM_SHA256", "Server Temp Key: X25519, 253 bits".
    fields = dict(line.split(": ", 1) for line in done.stderr.splitlines() if ": " in line)
    got = {"version": fields.get("Protocol version", "none"),
           "cipher": fields.get("Ciphersuite", "none"),
           "group": fields.get("Server Temp Key", "none").split(",")[0]}
    expected = {"version": "TLSv1.3", "cipher": measure.TLS_CIPHER, "group": measure.TLS_GROUP}
    if got != expected:
        raise CheckError(f"TLS negotiated {got}, expected {expected}")
    return got


def check(case, corpus: Corpus, port: int) -> dict:
    """Check `port` serves `case` correctly; return what was checked, or raise CheckError."""
    if case.http3:
        conn = _Http3Connection(port)
    elif case.streams:
        conn = _Http2Connection(port, case.tls)
    elif case.tls:
        # The benchmark's certificate is self-signed: encryption is what is measured.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        if case.corpus == "hello":
            _expect(conn, case.path, 200, b"Hello World!", None)
            checked = {"checked": 1}
        elif case.corpus == "answer":
            _expect(conn, "/answer", 200, b"42", "text/plain")
            _expect(conn, "/question", 404, None, None)
            checked = {"checked": 2}
        else:
            encodings = _check_sample(conn, corpus, case.accept_encoding)
            checked = {"checked": sum(encodings.values()), "encodings": encodings}
    except (OSError, http.client.HTTPException, subprocess.TimeoutExpired) as err:
        raise CheckError(f"request failed: {err}") from err
    finally:
        conn.close()
    if case.http3:
        # QUIC is TLS 1.3 only; the suite is the server's choice (h3.py offers oha's
        # order), the group the server's too: kiln prefers X25519, Caddy is held to it.
        if conn.cipher != measure.TLS_CIPHER:
            raise CheckError(f"QUIC negotiated {conn.cipher}, expected {measure.TLS_CIPHER}")
        if conn.max_streams is not None and conn.max_streams < case.streams:
            raise CheckError(f"the server allows {conn.max_streams} concurrent streams, "
                             f"the case opens {case.streams}")
        checked.update(protocol="h3", quic_cipher=conn.cipher,
                       max_concurrent_streams=conn.max_streams)
    elif case.streams:
        path = case.path or sample_paths(corpus, 1, SAMPLE_SEED)[0]
        streams = _max_concurrent_streams(port, case.tls, path)
        if streams is not None and streams < case.streams:
            raise CheckError(f"the server allows {streams} concurrent streams, the case "
                             f"opens {case.streams}")
        checked.update(protocol="h2" if case.tls else "h2c", max_concurrent_streams=streams)
    return checked
