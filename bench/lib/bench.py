#!/usr/bin/env python3
"""kiln's benchmark: kiln against nginx, h2o and Caddy, each on one core, the load client (wrk
for HTTP/1.1, h2load for HTTP/2, oha for HTTP/3) on the other.

Entry point of bench/run and bench/report. Prepares the machine and the corpora, then
runs every case on every server, interleaved (kiln, nginx, h2o, caddy, kiln, ...) for several
rounds, saving each run to a JSON file as it goes, then the per-connection figures (syscalls
per request; with HTTP/3 cases, bytes on the wire per response and memory per idle
connection), and finally writes the report.
"""

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import checks
import corpora
import measure
import prepare
import report
import servers
import wire

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO = BENCH_DIR.parent
WORK = BENCH_DIR / "work"
# Seed of the random-path order in paths.lua and of the h2 cases' shuffled path list (same
# order for every server).
PATHS_SEED = 42
# Share of idle CPU over 1 s that counts as a quiet machine before a run.
QUIET_IDLE_SHARE = 0.9
# Server order inside a round: the peers run right after kiln, in the same conditions.
SERVER_ORDER = ["kiln", "kiln-epoll", "kiln-baseline", "kiln-dummy", "nginx", "h2o", "caddy"]
# Servers whose syscalls per request are counted (kiln --dummy is not a real server).
STRACED_SERVERS = ["kiln", "kiln-epoll", "nginx", "h2o", "caddy"]


@dataclass(frozen=True)
class Case:
    """One load shape on one corpus."""

    # Name in results and in the report.
    name: str
    # Corpus served (see corpora.py).
    corpus: str
    # Concurrent connections of the load client.
    connections: int
    # Fixed request path, or "" for random paths drawn from the corpus's list.
    path: str = "/index.txt"
    # Accept-Encoding sent by the load client (None: no header).
    accept_encoding: str | None = None
    # Requests sent per write (HTTP/1.1 pipelining); 1 means none.
    pipeline: int = 1
    # Idle keep-alive connections held open during the run.
    idle: int = 0
    # Over TLS (1.3, P-256 certificate) instead of cleartext.
    tls: bool = False
    # `Connection: close` on every request: one new connection (over TLS, one full
    # handshake) per request.
    close: bool = False
    # HTTP/2 through h2load with this many concurrent streams per connection (h2c by prior
    # knowledge, or h2 by ALPN with `tls`); 0 means HTTP/1.1 through wrk.
    streams: int = 0
    # HTTP/3 (QUIC) instead of HTTP/2, through oha, `streams` requests in flight per
    # connection; with `tls` (QUIC's TLS 1.3 takes the same certificate).
    http3: bool = False
    # oha instead of h2load: the HTTP/3 cases, and their HTTP/2 twins over TLS, which
    # compare HTTP/3 with HTTP/2 through the same client.
    oha: bool = False
    # Part of the --quick subset.
    quick: bool = False


CASES = [
    Case("hello-c16", "hello", 16),
    Case("hello-c128", "hello", 128, quick=True),
    Case("hello-c512", "hello", 512),
    Case("hello-c2048", "hello", 2048),
    Case("hello-pipelined16-c128", "hello", 128, pipeline=16, quick=True),
    Case("answer-c10", "answer", 10, path="/answer"),
    Case("answer-c100", "answer", 100, path="/answer", quick=True),
    Case("answer-c800", "answer", 800, path="/answer"),
    Case("pydocs-identity-c128", "pydocs", 128, path=""),
    Case("pydocs-gzip-c128", "pydocs", 128, path="", accept_encoding="gzip", quick=True),
    Case("pydocs-br-c128", "pydocs", 128, path="", accept_encoding="br, gzip"),
    Case("tiles-c128", "tiles", 128, path="", quick=True),
    Case("tiles-c2048", "tiles", 2048, path=""),
    Case("hello-c128-idle10k", "hello", 128, idle=10_000, quick=True),
    Case("tls-hello-c128", "hello", 128, tls=True, quick=True),
    Case("tls-pydocs-br-c128", "pydocs", 128, path="", accept_encoding="br, gzip", tls=True),
    Case("tls-handshake-c128", "hello", 128, tls=True, close=True, quick=True),
    Case("tls-hello-c128-idle10k", "hello", 128, idle=10_000, tls=True),
    Case("h2c-hello-c128x16", "hello", 128, streams=16, quick=True),
    Case("h2c-hello-c128x100", "hello", 128, streams=100),
    Case("h2c-pydocs-br-c128x16", "pydocs", 128, path="", accept_encoding="br, gzip",
         streams=16),
    Case("h2c-tiles-c128x16", "tiles", 128, path="", streams=16),
    Case("h2-hello-c128x16", "hello", 128, streams=16, tls=True, quick=True),
    Case("h2-hello-c128x100", "hello", 128, streams=100, tls=True),
    Case("h2-pydocs-br-c128x16", "pydocs", 128, path="", accept_encoding="br, gzip",
         streams=16, tls=True),
    Case("h2-tiles-c128x16", "tiles", 128, path="", streams=16, tls=True),
    Case("h3-hello-c16x8", "hello", 16, streams=8, tls=True, http3=True, oha=True),
    Case("h3-hello-c128x16", "hello", 128, streams=16, tls=True, http3=True, oha=True),
    Case("h3-pydocs-br-c128x16", "pydocs", 128, path="", accept_encoding="br, gzip",
         streams=16, tls=True, http3=True, oha=True),
    Case("h2-oha-hello-c16x8", "hello", 16, streams=8, tls=True, oha=True),
    Case("h2-oha-hello-c128x16", "hello", 128, streams=16, tls=True, oha=True),
    Case("h2-oha-pydocs-br-c128x16", "pydocs", 128, path="", accept_encoding="br, gzip",
         streams=16, tls=True, oha=True),
]
# Named sets of cases (--set): issue 23's matrix is the HTTP/2 hello cases, the
# handshakes and HTTPS keep-alive it sets goals for, and the cases it must not regress;
# issue 24's, the HTTP/3 cases and their HTTP/2 twins through the same client.
CASE_SETS = {
    "issue23": ["h2c-hello-c128x16", "h2-hello-c128x16", "tls-handshake-c128",
                "tls-hello-c128", "hello-c128", "hello-pipelined16-c128", "pydocs-gzip-c128",
                "tiles-c128", "h2-pydocs-br-c128x16"],
    "issue24": [c.name for c in CASES if c.oha],
}
# The servers a set runs on unless --servers names others: HTTP/3 is served by kiln and
# Caddy only here (nginx 1.22 and h2o 2.2 have none).
SET_SERVERS = {"issue24": ["kiln", "caddy"]}
# oha's cases set the servers' idle timeout to this many seconds: over HTTP/3 oha exits
# only once the server has ended its connections (measure.run_oha). The connections of a
# run are never idle before it ends.
OHA_IDLE_TIMEOUT_S = 2
# Longest wait for oha to exit after its window before the run fails.
OHA_EXIT_WAIT_S = 30.0
# Bytes on the wire per response are counted on these cases (small responses), one
# bounded run each with nftables counters, apart from the measured runs.
WIRE_CASES = ["h3-hello-c16x8", "h2-oha-hello-c16x8"]
# Idle connections held to weigh one (memory per idle connection, HTTP/3 and HTTP/2).
IDLE_WEIGHED = 1000
# Longest time the idle-connection holder may take to open them.
IDLE_OPEN_TIMEOUT_S = 120
# The syscall counts run these cases, shorter, with strace attached.
STRACE_CASES = [c for c in CASES if c.name in ("hello-c128", "tls-hello-c128")]


@dataclass(frozen=True)
class Settings:
    """Durations and repetitions of one invocation."""

    # Interleaved rounds over all cases and servers.
    rounds: int
    # Seconds of unmeasured load before each measured run (wrk takes whole seconds).
    warmup_s: int
    # Seconds of each measured run.
    duration_s: int
    # Longest wait for a quiet machine before a run.
    quiet_wait_s: float
    # Seconds of load while strace counts syscalls.
    strace_s: int


FULL = Settings(rounds=3, warmup_s=2, duration_s=8, quiet_wait_s=10, strace_s=5)
QUICK = Settings(rounds=1, warmup_s=1, duration_s=2, quiet_wait_s=1, strace_s=2)


def output_paths(quick: bool, subset: bool) -> tuple[Path, Path, Path]:
    """(results.json, RESULTS.md, results.png): quick runs and runs of a subset of the
    cases or servers never overwrite the real report."""
    if quick or subset:
        other_dir = WORK / ("quick" if quick else "subset")
        return other_dir / "results.json", other_dir / "RESULTS.md", other_dir / "results.png"
    return WORK / "results.json", BENCH_DIR / "RESULTS.md", BENCH_DIR / "results.png"


def wrk_command(case: Case, corpus: corpora.Corpus, port: int, duration_s: int) -> list[str]:
    """The wrk command line for `case` against `port`."""
    base = f"{'https' if case.tls else 'http'}://127.0.0.1:{port}"
    headers = {"Accept-Encoding": case.accept_encoding} if case.accept_encoding else {}
    if case.close:
        headers["Connection"] = "close"
    if case.pipeline > 1:
        return measure.wrk_argv(base, case.connections, duration_s, "pipeline.lua",
                                [case.path, str(case.pipeline)], headers)
    if not case.path:
        return measure.wrk_argv(base, case.connections, duration_s, "paths.lua",
                                [str(corpus.paths_file), str(PATHS_SEED)], headers)
    return measure.wrk_argv(base + case.path, case.connections, duration_s, "report.lua",
                            [], headers)


def h2load_command(case: Case, corpus: corpora.Corpus, port: int, duration_s: int,
                   log: Path | None) -> list[str]:
    """The h2load command line for `case` against `port` (`log`: see measure.h2load_argv)."""
    base = f"{'https' if case.tls else 'http'}://127.0.0.1:{port}"
    headers = {"Accept-Encoding": case.accept_encoding} if case.accept_encoding else {}
    uri_file = None if case.path else corpora.shuffled_paths(corpus, PATHS_SEED)
    return measure.h2load_argv(base + case.path, case.connections, case.streams, duration_s,
                               headers, uri_file, log)


def oha_command(case: Case, corpus: corpora.Corpus, port: int, duration_s: int,
                run_dir: Path) -> list[str]:
    """The oha command line for `case` against `port`. A random-path case reads the
    corpus's path list as URLs (written to `run_dir` for this port): oha draws one at
    random per request, as bench/lua/paths.lua does for wrk."""
    base = f"https://127.0.0.1:{port}"
    headers = {"Accept-Encoding": case.accept_encoding} if case.accept_encoding else {}
    urls = None
    if not case.path:
        urls = run_dir / f"oha-urls-{corpus.name}.txt"
        urls.write_text("".join(f"{base}{path}\n" for path in
                                corpus.paths_file.read_text().split()))
    return measure.oha_argv(base + case.path, case.connections, case.streams, duration_s,
                            "3" if case.http3 else "2", headers, urls)


def runs(entry: servers.ServerEntry, case: Case) -> bool:
    """Whether `entry` takes part in `case`: kiln --dummy the cleartext HTTP/1.1 hello
    cases only; the oha cases (HTTP/3 and their HTTP/2 twins) the servers that serve
    HTTP/3."""
    if case.oha:
        return entry.http3
    return not entry.ceiling_only or (case.corpus == "hello" and not case.idle
                                      and not case.tls and not case.streams)


class Bench:
    """One invocation: the prepared corpora and packs, the settings, the results so far."""

    def __init__(self, settings: Settings, prepared: dict, packs: dict, results: dict,
                 results_path: Path, certificate: servers.Certificate):
        # Durations and rounds.
        self.settings = settings
        # Corpus name -> corpora.Corpus.
        self.corpora = prepared
        # Corpus name -> kiln pack (empty when kiln does not run).
        self.packs = packs
        # Everything recorded, saved after each run so an interruption loses little.
        self.results = results
        # Where `results` is saved.
        self.results_path = results_path
        # What every server presents on the TLS cases.
        self.certificate = certificate
        # The OpenSSL clients' environment: TLS parameters restricted (measure.client_env).
        self.client_env = measure.client_env(WORK)

    def save(self) -> None:
        self.results_path.parent.mkdir(parents=True, exist_ok=True)
        self.results_path.write_text(json.dumps(self.results, indent=1) + "\n")

    def start(self, entry: servers.ServerEntry, case: Case,
              own_idle_timeout: bool = False) -> servers.RunningServer:
        """Start `entry` for `case`: on the oha cases with OHA_IDLE_TIMEOUT_S unless
        `own_idle_timeout` (the idle connections weighed), with the server's own."""
        short_idle = case.oha and not own_idle_timeout
        listening = servers.Listening(
            tls=self.certificate if case.tls else None,
            http2=case.streams > 0 and not case.http3, http3=case.http3,
            idle_timeout_s=OHA_IDLE_TIMEOUT_S if short_idle else None)
        return servers.start(entry, self.corpora[case.corpus], self.packs,
                             WORK / "run" / entry.name, listening)

    def load(self, entry: servers.ServerEntry, case: Case, port: int, duration_s: int,
             pids: list[int], measured: bool) -> tuple[list[str], dict]:
        """Run the case's load client (wrk, h2load for HTTP/2, oha for the oha cases) for
        `duration_s`; return its command line and its summary (measure.run_wrk's keys; oha
        adds the server's CPU over its window). Only a `measured` h2load run writes the
        per-request log its percentiles come from."""
        corpus = self.corpora[case.corpus]
        if case.oha:
            argv = oha_command(case, corpus, port, duration_s, WORK / "run" / entry.name)
            return argv, measure.run_oha(argv, duration_s, pids, "h3" if case.http3 else "h2",
                                         OHA_EXIT_WAIT_S)
        if not case.streams:
            argv = wrk_command(case, corpus, port, duration_s)
            return argv, measure.run_wrk(argv, duration_s, pids, self.client_env)
        log = WORK / "run" / entry.name / "h2load-requests.tsv" if measured else None
        argv = h2load_command(case, corpus, port, duration_s, log)
        return argv, measure.run_h2load(argv, duration_s, pids, log,
                                        "h2" if case.tls else "h2c",
                                        case.connections * case.streams)

    def run_case(self, entry: servers.ServerEntry, case: Case, round_no: int) -> dict:
        """Check, warm up and measure one case on one server; return the run's record."""
        record = {"case": case.name, "server": entry.name, "round": round_no,
                  "quiet": measure.wait_for_quiet(QUIET_IDLE_SHARE, self.settings.quiet_wait_s)}
        try:
            server = self.start(entry, case)
        except servers.ServerError as err:
            record["error"] = str(err)
            return record
        holder = None
        try:
            corpus = self.corpora[case.corpus]
            record.update(server_argv=server.argv, port=server.port)
            record["check"] = checks.check(case, corpus, server.port)
            if case.tls:
                record["check"]["tls"] = checks.tls_parameters(server.port, self.client_env)
            pids = measure.process_tree(server.process.pid)
            if case.idle:
                record["idle"] = {"requested": case.idle, "rss_before_kib": measure.rss_kib(pids)}
                holder = measure.IdleHolder(server.port, case.idle, case.path,
                                            "tls" if case.tls else "h1",
                                            timeout_s=self.settings.duration_s * 4 + 120,
                                            env=self.client_env)
                record["idle"]["opened"] = holder.wait_open()
                record["idle"]["rss_after_open_kib"] = measure.rss_kib(pids)
            self.load(entry, case, server.port, self.settings.warmup_s, pids, measured=False)
            cpu_before = measure.cpu_seconds(pids)
            argv, wrk = self.load(entry, case, server.port, self.settings.duration_s, pids,
                                  measured=True)
            # oha's runs: the server's CPU over oha's window, not its wait after it.
            server_cpu = wrk.pop("server_cpu_s", None)
            if server_cpu is None:
                server_cpu = measure.cpu_seconds(pids) - cpu_before
            if case.pipeline > 1:
                # wrk times a pipelined batch as one sample but corrects its histogram as
                # if each response were one, which corrupts the percentiles: drop them.
                wrk.update(dict.fromkeys(measure.LATENCY_KEYS))
            # "wrk" and "wrk_argv" are named after the first load client; they hold
            # h2load's summary and command line on the HTTP/2 cases.
            record.update(wrk_argv=argv, wrk=wrk, server_cpu_s=round(server_cpu, 2),
                          requests_per_cpu_s=round(wrk["requests"] / server_cpu)
                          if server_cpu > 0 else None)
            if holder is not None:
                record["idle"]["still_open"] = holder.finish()
            if server.process.poll() is not None:
                record["error"] = f"{entry.name} exited during the run"
        except (checks.CheckError, measure.MeasureError) as err:
            record["error"] = str(err)
        finally:
            if holder is not None and holder.process.poll() is None:
                holder.process.kill()
                holder.process.wait()
            server.stop()
        return record

    def count_syscalls(self, entry: servers.ServerEntry, case: Case) -> dict:
        """strace -c over a bounded run of `case`; syscalls divided by requests served."""
        record = {"server": entry.name, "case": case.name}
        try:
            server = self.start(entry, case)
        except servers.ServerError as err:
            record["error"] = str(err)
            return record
        try:
            checks.check(case, self.corpora[case.corpus], server.port)
            pids = measure.process_tree(server.process.pid)
            self.load(entry, case, server.port, self.settings.warmup_s, pids, measured=False)
            output = WORK / "run" / entry.name / "strace.txt"
            tracer = measure.start_strace(pids, output)
            argv, wrk = self.load(entry, case, server.port, self.settings.strace_s, pids,
                                  measured=False)
            calls = measure.stop_strace(tracer, output)
            top = sorted((c for c in calls.items() if c[0] != "total"), key=lambda c: -c[1])
            record.update(wrk_argv=argv, requests=wrk["requests"], total_calls=calls["total"],
                          per_request=round(calls["total"] / max(1, wrk["requests"]), 3),
                          top={name: round(n / max(1, wrk["requests"]), 3)
                               for name, n in top[:8]})
        except (checks.CheckError, measure.MeasureError) as err:
            record["error"] = str(err)
        finally:
            server.stop()
        return record

    def count_wire_bytes(self, entry: servers.ServerEntry, case: Case) -> dict:
        """nftables counters on the server's port over a bounded run of `case` (after a
        warm-up): transport payload bytes each way, divided by the responses."""
        record = {"server": entry.name, "case": case.name}
        try:
            server = self.start(entry, case)
        except servers.ServerError as err:
            record["error"] = str(err)
            return record
        try:
            checks.check(case, self.corpora[case.corpus], server.port)
            pids = measure.process_tree(server.process.pid)
            self.load(entry, case, server.port, self.settings.warmup_s, pids, measured=False)
            with wire.WireCounter(server.port) as counter:
                argv, load = self.load(entry, case, server.port, self.settings.strace_s, pids,
                                       measured=False)
                counted = counter.read()
            responses = load["requests"]
            record.update(wrk_argv=argv, requests=responses, **counted,
                          to_server_per_response=round(counted["to_server_bytes"] / responses, 1),
                          to_client_per_response=round(counted["to_client_bytes"] / responses, 1))
        except (checks.CheckError, measure.MeasureError, wire.WireError) as err:
            record["error"] = str(err)
        finally:
            server.stop()
        return record

    def weigh_idle(self, entry: servers.ServerEntry, protocol: str) -> dict:
        """Server memory (RSS and PSS) before and with IDLE_WEIGHED idle connections of
        `protocol` (h3 or h2, over TLS, on the hello corpus), each after one request; the
        server keeps its own idle timeout (kiln 60 s; Caddy 300 s, 30 s for QUIC, which
        the holder's PINGs keep from expiring)."""
        case = next(c for c in CASES if c.corpus == "hello" and c.oha
                    and c.http3 == (protocol == "h3"))
        record = {"server": entry.name, "protocol": protocol, "requested": IDLE_WEIGHED}
        try:
            server = self.start(entry, case, own_idle_timeout=True)
        except servers.ServerError as err:
            record["error"] = str(err)
            return record
        holder = None
        try:
            record["check"] = checks.check(case, self.corpora[case.corpus], server.port)
            pids = measure.process_tree(server.process.pid)
            record.update(rss_before_kib=measure.rss_kib(pids),
                          pss_before_kib=measure.pss_kib(pids))
            holder = measure.IdleHolder(server.port, IDLE_WEIGHED, case.path, protocol,
                                        timeout_s=IDLE_OPEN_TIMEOUT_S + 60,
                                        env=self.client_env)
            record["opened"] = holder.wait_open()
            record.update(rss_after_kib=measure.rss_kib(pids),
                          pss_after_kib=measure.pss_kib(pids))
            record["still_open"] = holder.finish()
            opened = max(1, record["opened"])
            record["rss_per_connection"] = round(
                (record["rss_after_kib"] - record["rss_before_kib"]) * 1024 / opened)
            record["pss_per_connection"] = round(
                (record["pss_after_kib"] - record["pss_before_kib"]) * 1024 / opened)
        except (checks.CheckError, measure.MeasureError) as err:
            record["error"] = str(err)
        finally:
            if holder is not None and holder.process.poll() is None:
                holder.process.kill()
                holder.process.wait()
            server.stop()
        return record


def describe(record: dict) -> str:
    """One console line for a finished run."""
    head = f"[r{record['round']}] {record['case']:<24} {record['server']:<10}"
    if "error" in record:
        return f"{head} ERROR: {record['error'].splitlines()[0]}"
    wrk = record["wrk"]
    latency = "  (no latency: pipelined)  " if wrk["p50_us"] is None else \
        f"  p50 {wrk['p50_us'] / 1000:6.2f} ms  p99 {wrk['p99_us'] / 1000:6.2f} ms  "
    line = (f"{head} {wrk['rps']:>11,.0f} req/s{latency}"
            f"{record['requests_per_cpu_s'] or 0:>9,} req/cpu-s"
            f"  {wrk['client']} {wrk['wrk_core_share']:.0%}  sock-err {wrk['socket_errors']}"
            f"  non2xx {wrk['non2xx']}")
    if "idle" in record:
        idle = record["idle"]
        line += f"  idle {idle['opened']} open, {idle.get('still_open')} kept"
    if not record["quiet"]["quiet"]:
        line += f"  (busy machine: {record['quiet']['idle_share']:.0%} idle)"
    return line


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run", description="Benchmark kiln against nginx, h2o and Caddy on one core.")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, short runs, a subset of cases (~3 min)")
    parser.add_argument("--servers",
                        help=f"comma-separated subset of {','.join(SERVER_ORDER)} (default: "
                        "all; kiln-baseline only with --baseline)")
    parser.add_argument("--baseline", type=Path, metavar="KILN",
                        help="another kiln binary (say, a build of the commit before a change) "
                        "run as kiln-baseline beside kiln, on packs the current kiln builds")
    parser.add_argument("--cases", help="comma-separated case names (default: all, or the "
                        "quick subset); known: " + ",".join(c.name for c in CASES))
    parser.add_argument("--set", choices=sorted(CASE_SETS),
                        help="a named set of cases (issue23: the HTTP/2 hello, handshake, "
                        "HTTPS keep-alive and no-regression cases of issue 23; issue24: "
                        "the HTTP/3 cases and their HTTP/2 twins through oha, bytes on the "
                        "wire and memory per idle connection, on kiln and Caddy)")
    parser.add_argument("--report-only", action="store_true",
                        help="only rewrite the report from the saved results")
    return parser.parse_args()


def select_cases(args: argparse.Namespace) -> list[Case]:
    if args.cases is None and args.set is None:
        return [c for c in CASES if c.quick or not args.quick]
    wanted = (args.cases.split(",") if args.cases else []) + CASE_SETS.get(args.set, [])
    unknown = set(wanted) - {c.name for c in CASES}
    if unknown:
        sys.exit(f"bench: error: unknown case(s) {', '.join(sorted(unknown))}")
    return [c for c in CASES if c.name in wanted]


def prepare_servers(names: list[str], cases: list[Case], baseline: Path | None):
    """Build kiln (when asked for), the corpora and the packs.

    Returns (kiln binary or None, corpora, packs, runnable entries, {skipped: why}).
    """
    kiln, kiln_unavailable = None, ""
    if {"kiln", "kiln-epoll", "kiln-baseline", "kiln-dummy"} & set(names):
        kiln, kiln_unavailable = prepare.build_kiln(REPO, WORK / "logs" / "cargo.log")
    prepared = corpora.prepare(WORK, {c.corpus for c in cases} | {"hello"})
    packs = {}
    if kiln is not None:
        try:
            packs = corpora.build_packs(kiln, WORK, prepared)
        except subprocess.CalledProcessError as err:
            kiln_unavailable = f"`{shlex.join(err.cmd)}` failed (exit status {err.returncode})"
            kiln = None
    entries = servers.entries(kiln, kiln_unavailable, baseline)
    skipped = {n: entries[n].unavailable for n in names if entries[n].unavailable}
    for name, why in skipped.items():
        print(f"bench: {name} skipped: {why}", flush=True)
    active = [entries[n] for n in SERVER_ORDER if n in names and n not in skipped]
    return kiln, prepared, packs, active, skipped


def measure_all(bench: Bench, cases: list[Case], active: list[servers.ServerEntry]) -> None:
    """The interleaved rounds, then the syscall counts; every record saved as it comes."""
    # The harness itself (checks, RSS sampling) stays off the server's core from here on;
    # not before, so that corpus generation and `kiln build` may use every core.
    os.sched_setaffinity(0, {int(measure.CLIENT_CORE)})
    for round_no in range(1, bench.settings.rounds + 1):
        for case in cases:
            for entry in active:
                if runs(entry, case):
                    record = bench.run_case(entry, case, round_no)
                    print(describe(record), flush=True)
                    bench.results["runs"].append(record)
                    bench.save()
    # The cleartext count (the core's figure) unless only oha's cases ran (--set
    # issue24); the TLS one when HTTP/1.1 over TLS was measured.
    any_tls = any(c.tls and not c.streams for c in cases)
    only_oha = all(c.oha for c in cases)
    for case in (c for c in STRACE_CASES if not only_oha and (any_tls or not c.tls)):
        for entry in active:
            if entry.name in STRACED_SERVERS:
                record = bench.count_syscalls(entry, case)
                shown = (record.get("error", "").split("\n")[0]
                         or f"{record['per_request']} per request")
                print(f"syscalls {case.name:<16} {entry.name:<12} {shown}", flush=True)
                bench.results["syscalls"].append(record)
                bench.save()
    if not any(c.http3 for c in cases):
        return
    http3_servers = [e for e in active if e.http3]
    for case in (c for c in cases if c.name in WIRE_CASES):
        for entry in http3_servers:
            record = bench.count_wire_bytes(entry, case)
            shown = (record.get("error", "").split("\n")[0]
                     or f"{record['to_server_per_response']} B in, "
                        f"{record['to_client_per_response']} B out per response")
            print(f"wire {case.name:<20} {entry.name:<12} {shown}", flush=True)
            bench.results["wire"].append(record)
            bench.save()
    for protocol in ("h3", "h2"):
        for entry in http3_servers:
            record = bench.weigh_idle(entry, protocol)
            shown = (record.get("error", "").split("\n")[0]
                     or f"{record['opened']} open, {record['still_open']} kept, "
                        f"{record['rss_per_connection']:,} B RSS, "
                        f"{record['pss_per_connection']:,} B PSS per connection")
            print(f"idle {protocol} {entry.name:<12} {shown}", flush=True)
            bench.results["idle_memory"].append(record)
            bench.save()


def main() -> int:
    args = parse_args()
    subset = (args.cases is not None or args.set is not None or args.servers is not None
              or args.baseline is not None)
    results_path, report_md, report_png = output_paths(args.quick, subset)
    if args.report_only:
        if not results_path.exists():
            print(f"bench: error: {results_path}: no saved results; run bench/run first",
                  file=sys.stderr)
            return 1
        report.write(json.loads(results_path.read_text()), report_md, report_png)
        return 0
    default = SET_SERVERS.get(args.set) or [n for n in SERVER_ORDER
                                            if n != "kiln-baseline" or args.baseline]
    names = args.servers.split(",") if args.servers else default
    unknown = set(names) - set(SERVER_ORDER)
    if unknown:
        print(f"bench: error: unknown server(s) {', '.join(sorted(unknown))}; "
              f"known: {', '.join(SERVER_ORDER)}", file=sys.stderr)
        return 1
    cases = select_cases(args)
    settings = QUICK if args.quick else FULL
    try:
        prepare.install_tools()
        if "caddy" in names:
            prepare.install_caddy()
        if any(c.oha for c in cases):
            prepare.install_oha()
    except prepare.SetupError as err:
        print(f"bench: error: {err}", file=sys.stderr)
        return 1
    # Every server and client here needs more than the default 1024 descriptors.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    kiln, prepared, packs, active, skipped = prepare_servers(names, cases, args.baseline)
    if not active:
        print("bench: error: no server left to measure", file=sys.stderr)
        return 1
    results = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "settings": asdict(settings),
        "machine": prepare.machine(),
        "versions": prepare.versions(kiln, REPO),
        "baseline": str(args.baseline) if args.baseline else None,
        "servers": [e.name for e in active],
        "skipped": skipped,
        "cases": [asdict(c) for c in cases],
        "runs": [],
        "syscalls": [],
        "wire": [],
        "idle_memory": [],
    }
    certificate = servers.make_certificate(WORK / "tls")
    bench = Bench(settings, prepared, packs, results, results_path, certificate)
    bench.save()
    measure_all(bench, cases, active)
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    bench.save()
    report.write(results, report_md, report_png)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        # Servers were stopped on the way out; the runs so far are in the JSON file.
        print("bench: interrupted; `bench/report` reports the runs saved so far",
              file=sys.stderr)
        sys.exit(130)
