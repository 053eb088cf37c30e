"""Checks made before each measured run: the server must answer right, or it is not timed.

Fixed-path cases check status, body and length; random-path cases fetch a fixed sample
of the corpus with the case's Accept-Encoding, decode the body and compare it with the
file on disk, so a server that answers fast but wrong cannot score.
"""

import gzip
import http.client
import ssl
from pathlib import Path
from urllib.parse import unquote

from corpora import Corpus, sample_paths

# Paths checked per random-path case, and the seed that picks them.
SAMPLE_SIZE = 25
SAMPLE_SEED = 7


def _brotli_decompress(body: bytes) -> bytes:
    # Imported on use: bench/run pip-installs Brotli after this module is loaded.
    import brotli

    return brotli.decompress(body)


# Content-Encoding -> how to get the file's bytes back.
DECODERS = {"identity": lambda body: body, "gzip": gzip.decompress, "br": _brotli_decompress}


class CheckError(Exception):
    """A response was wrong; the message names the path and what was wrong."""


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str]):
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


def check(case, corpus: Corpus, port: int) -> dict:
    """Check `port` serves `case` correctly; return what was checked, or raise CheckError."""
    if case.tls:
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
            return {"checked": 1}
        if case.corpus == "answer":
            _expect(conn, "/answer", 200, b"42", "text/plain")
            _expect(conn, "/question", 404, None, None)
            return {"checked": 2}
        encodings = _check_sample(conn, corpus, case.accept_encoding)
        return {"checked": sum(encodings.values()), "encodings": encodings}
    except (OSError, http.client.HTTPException) as err:
        raise CheckError(f"request failed: {err}") from err
    finally:
        conn.close()
