"""The servers under test: one entry per server, each started alone on core 0.

An entry knows how to write its configuration and its command line for one corpus. To
add a server, add an entry to `entries()`; the rest of the harness only sees the entry.
"""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from corpora import Corpus
from measure import TLS_CIPHER, TLS_GROUP
from prepare import CADDY_VERSION, caddy_binary

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# The core the server runs on; the load client and the idle-connection holder get the
# other one.
SERVER_CORE = "0"
# How long a server may take to accept connections after it is started.
START_TIMEOUT_S = 15.0
# Caddy's idle timeout unless a case sets one: keep-alive connections, idle ones
# included, live through a whole run.
CADDY_IDLE_TIMEOUT_S = 300


class ServerError(Exception):
    """A server did not start; the message carries the tail of its log."""


@dataclass(frozen=True)
class Certificate:
    """The certificate every server presents on the TLS cases (ECDSA P-256, self-signed)."""

    # PEM certificate.
    cert: Path
    # PEM private key (PKCS#8).
    key: Path


def make_certificate(directory: Path) -> Certificate:
    """A P-256 certificate for localhost and 127.0.0.1, made once and reused."""
    directory.mkdir(parents=True, exist_ok=True)
    certificate = Certificate(directory / "cert.pem", directory / "key.pem")
    if not (certificate.cert.exists() and certificate.key.exists()):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "3650", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", str(certificate.key), "-out", str(certificate.cert)],
            check=True, capture_output=True)
    return certificate


@dataclass(frozen=True)
class Listening:
    """What a case needs the server to listen for."""

    # The certificate to listen with over TLS, or None for cleartext.
    tls: Certificate | None = None
    # The case speaks HTTP/2 (h2 by ALPN over TLS, h2c by prior knowledge over cleartext).
    http2: bool = False
    # The case speaks HTTP/3: the server also serves QUIC on the UDP twin of its TLS port.
    http3: bool = False
    # Seconds an idle connection stays open, or None for the server's own setting. oha
    # waits after its run until the server closes its QUIC connections (bench.py: the oha
    # cases set a short one).
    idle_timeout_s: int | None = None


@dataclass
class ServerEntry:
    """How to run one server."""

    # Name used by --servers, in results and in the report.
    name: str
    # Writes any configuration and returns the argv: (corpus, port, run_dir, packs,
    # listening).
    command: Callable[[Corpus, int, Path, dict, Listening], list[str]]
    # kiln --dummy: it answers `Hello World!` to anything, so it only measures the
    # core's ceiling on the plain hello cases.
    ceiling_only: bool = False
    # It serves HTTP/3 (the HTTP/3 cases and their HTTP/2 twins run on these only).
    http3: bool = False
    # Why the entry cannot run on this machine, or "" when it can.
    unavailable: str = ""


def _render(template: str, target: Path, values: dict[str, str]) -> Path:
    """Fill the `@KEY@` placeholders of bench/conf/`template` into `target`."""
    text = (CONF_DIR / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    target.write_text(text)
    return target


def _nginx(corpus: Corpus, port: int, run_dir: Path, packs: dict,
           listening: Listening) -> list[str]:
    tls, http2 = listening.tls, listening.http2
    tls_lines = "" if tls is None else _nginx_tls_lines(tls)
    conf = _render("nginx.conf", run_dir / "nginx.conf",
                   {"RUN_DIR": str(run_dir), "PORT": str(port), "ROOT": str(corpus.root),
                    "SSL": "" if tls is None else " ssl", "HTTP2": " http2" if http2 else "",
                    "TLS": tls_lines})
    # -e: the log used before the configuration is read (default: /var/log/nginx).
    return ["nginx", "-p", str(run_dir), "-e", str(run_dir / "error.log"), "-c", str(conf)]


def _h2o(corpus: Corpus, port: int, run_dir: Path, packs: dict,
         listening: Listening) -> list[str]:
    tls = listening.tls
    # h2o's listeners speak HTTP/1.1 and HTTP/2 alike (see bench/conf/h2o.conf).
    tls_lines = "" if tls is None else (
        f"  ssl:\n    certificate-file: {tls.cert}\n    key-file: {tls.key}\n"
        "    minimum-version: TLSv1.2\n")
    conf = _render("h2o.conf", run_dir / "h2o.conf",
                   {"PORT": str(port), "ROOT": str(corpus.root), "TLS": tls_lines})
    return ["h2o", "-c", str(conf)]


def _nginx_tls_lines(tls: Certificate) -> str:
    """nginx's TLS lines: the certificate, TLS 1.3 only, the group and cipher the clients
    are restricted to (measure.TLS_GROUP, TLS_CIPHER), so nothing depends on them."""
    return (f"ssl_certificate {tls.cert};\n        ssl_certificate_key {tls.key};\n"
            "        ssl_protocols TLSv1.3;\n"
            f"        ssl_ecdh_curve {TLS_GROUP};\n"
            f"        ssl_conf_command Ciphersuites {TLS_CIPHER};")


def _caddy(corpus: Corpus, port: int, run_dir: Path, packs: dict,
           listening: Listening) -> list[str]:
    # The site block speaks HTTP/1.1 and HTTP/2 alike (see bench/conf/Caddyfile), and
    # HTTP/3 on the HTTP/3 cases only. Go's TLS 1.3 has no cipher setting: it picks
    # AES-128-GCM first on a CPU with AES instructions, whatever the client prefers.
    tls = listening.tls
    tls_lines = "" if tls is None else (
        f"\ttls {tls.cert} {tls.key} {{\n\t\tprotocols tls1.3\n"
        f"\t\tcurves {TLS_GROUP.lower()}\n\t}}\n")
    conf = _render("Caddyfile", run_dir / "Caddyfile",
                   {"PORT": str(port), "ROOT": str(corpus.root), "TLS": tls_lines,
                    "SCHEME": "https://" if tls else "http://",
                    "PROTOCOLS": "h1 h2 h3" if listening.http3 else "h1 h2 h2c",
                    "IDLE": f"{listening.idle_timeout_s or CADDY_IDLE_TIMEOUT_S}s"})
    return ["env", "GOMAXPROCS=1", f"XDG_DATA_HOME={run_dir}", f"XDG_CONFIG_HOME={run_dir}",
            str(caddy_binary()), "run", "--config", str(conf), "--adapter", "caddyfile"]


def _kiln_command(kiln: Path, dummy: bool, io: str | None = None):
    """kiln serve on one thread; security headers off as nginx and h2o send none. Its
    listeners speak HTTP/1.1 and HTTP/2 alike: h2c by prior knowledge on --listen, h2
    offered by ALPN on --listen-tls, and HTTP/3 on the UDP twin of --listen-tls (kiln's
    default, on every TLS case). `io`: the connection layer (--io), else kiln's
    default (auto: io_uring where the kernel has it)."""

    def command(corpus: Corpus, port: int, run_dir: Path, packs: dict,
                listening: Listening) -> list[str]:
        tls = listening.tls
        argv = [str(kiln), "serve", str(packs[corpus.name]), "--threads", "1",
                "--no-security-headers"]
        if io is not None:
            argv += ["--io", io]
        if listening.idle_timeout_s is not None:
            # Over QUIC too: kiln's QUIC idle timeout is its keep-alive timeout.
            argv += ["--keepalive-timeout", str(listening.idle_timeout_s)]
        if tls is None:
            argv += ["--listen", f"127.0.0.1:{port}"]
        else:
            argv += ["--listen-tls", f"127.0.0.1:{port}", "--tls-cert", str(tls.cert),
                     "--tls-key", str(tls.key)]
        return argv + ["--dummy"] if dummy else argv

    return command


def entries(kiln: Path | None, kiln_unavailable: str,
            baseline: Path | None = None) -> dict[str, ServerEntry]:
    """Every known server entry, by name; kiln's are marked unavailable without a binary.
    `baseline`: another kiln binary (an older commit's) to compare against in the same run."""
    kiln_path = kiln or Path("kiln")
    return {
        "kiln-baseline": ServerEntry(
            "kiln-baseline", _kiln_command(baseline or Path("kiln"), False), http3=True,
            unavailable="" if baseline else "no --baseline binary given"),
        "kiln": ServerEntry("kiln", _kiln_command(kiln_path, False), http3=True,
                            unavailable=kiln_unavailable),
        # The same kiln on its epoll back end: the "io" comparison (kiln's default is
        # io_uring where the kernel has it, which this machine's has).
        "kiln-epoll": ServerEntry("kiln-epoll", _kiln_command(kiln_path, False, "epoll"),
                                  http3=True, unavailable=kiln_unavailable),
        "kiln-dummy": ServerEntry("kiln-dummy", _kiln_command(kiln_path, True),
                                  ceiling_only=True, unavailable=kiln_unavailable),
        "nginx": ServerEntry("nginx", _nginx),
        "h2o": ServerEntry("h2o", _h2o),
        "caddy": ServerEntry("caddy", _caddy, http3=True, unavailable="" if caddy_binary() else (
            "caddy not found on PATH nor in ~/go/bin, and `go install "
            f"github.com/caddyserver/caddy/v2/cmd/caddy@{CADDY_VERSION}` did not make it")),
    }


def free_port() -> int:
    """A loopback port free right now for TCP and for UDP (the HTTP/3 twin of a TLS
    port); a new one per run keeps TIME_WAIT tuples apart."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as twin:
                try:
                    twin.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port


@dataclass
class RunningServer:
    """A started server process (the root of its process tree)."""

    # The entry it was started from.
    entry: ServerEntry
    # The root process (nginx's master; kiln and h2o have one process).
    process: subprocess.Popen
    # Loopback port it listens on.
    port: int
    # Exact command line, for the report.
    argv: list[str]
    # Its stdout/stderr log, shown when it fails.
    log: Path
    # Open handle of `log`, closed on stop.
    log_file: TextIO = field(repr=False)

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log_file.close()


def _log_tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return "\n".join(lines[-10:]) or "(no output)"


def start(entry: ServerEntry, corpus: Corpus, packs: dict, run_dir: Path,
          listening: Listening = Listening()) -> RunningServer:
    """Start `entry` on core 0 for `corpus`, listening as `listening` says; return once
    it accepts TCP connections."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = entry.command(corpus, port, run_dir, packs, listening)
    log = run_dir / "server.log"
    log_file = log.open("w")
    process = subprocess.Popen(
        ["taskset", "-c", SERVER_CORE, *argv],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = RunningServer(entry, process, port, argv, log, log_file)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log_file.close()
            raise ServerError(f"{entry.name} exited with status {process.returncode}:\n"
                              f"{_log_tail(log)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise ServerError(f"{entry.name} did not accept connections within {START_TIMEOUT_S} s:\n"
                      f"{_log_tail(log)}")
