"""Measuring one run: the load (wrk, h2load on the HTTP/2 cases, oha on the HTTP/3 ones
and their HTTP/2 twins), the server's CPU and memory, the machine's quiet.

Server figures come from /proc, summed over the server's process tree (nginx runs a
master and a worker). The load client's CPU time comes from the kernel's accounting of
reaped children, so the harness can tell when the client, not the server, was the limit.
The clients' summaries have the same keys (those of bench/lua/report.lua, then the ones
run_wrk adds), so the report reads an HTTP/2 or HTTP/3 run like an HTTP/1 one.
"""

import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
# The TLS parameters every client offers, so every server negotiates the same ones (left
# to their defaults, OpenSSL clients offer AES-256-GCM first and rustls and Go follow the
# client's order): TLS 1.3, X25519, AES-128-GCM. h2load takes them as options; wrk and
# the Python idle-connection holder read them from OPENSSL_CONF (client_env()).
TLS_GROUP = "X25519"
TLS_CIPHER = "TLS_AES_128_GCM_SHA256"
OPENSSL_CLIENT_CONF = f"""\
openssl_conf = bench_client
[bench_client]
ssl_conf = bench_ssl
[bench_ssl]
system_default = bench_tls
[bench_tls]
MinProtocol = TLSv1.3
Groups = {TLS_GROUP}
Ciphersuites = {TLS_CIPHER}
"""
# The core the load client (and the idle-connection holder) runs on; the server has
# core 0.
CLIENT_CORE = "1"
# Clock ticks per second, the unit of utime/stime in /proc/PID/stat.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Share of the load client's core above which the client, not the server, limited the
# run.
CLIENT_BOUND_SHARE = 0.95
# wrk's per-request timeout; slower responses are counted as timeouts.
WRK_TIMEOUT = "2s"
# Marker of the JSON line printed by bench/lua/report.lua.
RESULT_MARKER = "BENCH_RESULT "
# Interval between samples of the server's RSS during a run.
RSS_SAMPLE_S = 0.25
# Latency figures in report.lua's line.
LATENCY_KEYS = ["p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us"]
# h2load's start-up: its requests that started this long after its first are past it. Its
# one thread does every connection's TLS handshake first, in libev turns of up to 128
# events; the requests a connection sends one turn after its handshake wait for the
# next turn, which handles other connections' handshakes first. Its longest time per
# request is that wait, tens of ms whatever the server (bench/FLOOR.md, "h2load's mean
# and max").
H2LOAD_STARTUP_US = 1_000_000
# h2load's summary lines (nghttp2 1.52): its run time and req/s, the request counts, the
# statuses, the bytes received, and the protocols negotiated (TLS lines over TLS only).
H2LOAD_FINISHED = re.compile(r"^finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", re.M)
H2LOAD_REQUESTS = re.compile(
    r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout", re.M)
H2LOAD_STATUSES = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx",
                             re.M)
H2LOAD_TRAFFIC = re.compile(r"^traffic: .*?\((\d+)\) total", re.M)
H2LOAD_ALPN = re.compile(r"^Application protocol: (\S+)", re.M)
H2LOAD_TLS = re.compile(r"^(?:TLS )?Protocol: (\S+)", re.M)
H2LOAD_CIPHER = re.compile(r"^Cipher: (\S+)", re.M)
H2LOAD_GROUP = re.compile(r"^Server Temp Key: (\S+)", re.M)
H2LOAD_HEADERS = re.compile(r"^traffic: .*?, [\d.]+\w*B \((\d+)\) headers", re.M)
# h2load's units of "finished in", in microseconds.
H2LOAD_UNITS_US = {"us": 1, "ms": 1e3, "s": 1e6}


class MeasureError(Exception):
    """A measuring tool failed; the message says what it printed."""


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants, found through the parent ids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes (all their threads included)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # Fields 14 (utime) and 15 (stime) of proc(5); field 3 is fields[0].
        ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def rss_kib(pids: list[int]) -> int:
    """Resident memory (VmRSS) of the processes, summed, in KiB."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def pss_kib(pids: list[int]) -> int:
    """Proportional set size (Pss of smaps_rollup) of the processes, summed, in KiB: their
    resident memory with pages shared with other processes (the binary, libraries)
    divided among those."""
    total = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all cores, from the first line of /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    # idle and iowait are columns 4 and 5; guest time is already inside user.
    return values[3] + values[4], sum(values[:8])


def wait_for_quiet(min_idle: float, max_wait_s: float) -> dict:
    """Sample the machine's idle share over 1 s until it reaches `min_idle` or time is up."""
    started = time.monotonic()
    while True:
        idle_before, total_before = _cpu_times()
        time.sleep(1.0)
        idle_after, total_after = _cpu_times()
        idle = (idle_after - idle_before) / max(1, total_after - total_before)
        waited = time.monotonic() - started
        if idle >= min_idle or waited >= max_wait_s:
            return {"quiet": idle >= min_idle, "idle_share": round(idle, 3),
                    "waited_s": round(waited, 1)}


def client_env(work: Path) -> dict[str, str]:
    """The environment of the OpenSSL load clients: OPENSSL_CONF pointing at a file (written
    under `work`) that restricts them to TLS_GROUP and TLS_CIPHER."""
    conf = work / "openssl-client.cnf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    if not conf.exists() or conf.read_text() != OPENSSL_CLIENT_CONF:
        conf.write_text(OPENSSL_CLIENT_CONF)
    return {**os.environ, "OPENSSL_CONF": str(conf)}


def wrk_argv(url: str, connections: int, duration_s: int, script: str,
             script_args: list[str], headers: dict[str, str]) -> list[str]:
    """The wrk command line (one thread, on the client core)."""
    argv = ["taskset", "-c", CLIENT_CORE, "wrk", "-t1", f"-c{connections}",
            f"-d{duration_s}s", "--timeout", WRK_TIMEOUT, "-s", str(LUA_DIR / script)]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    if script_args:
        argv += ["--", *script_args]
    return argv


def _run_client(argv: list[str], duration_s: int, server_pids: list[int],
                env: dict[str, str] | None):
    """Run a load client (in `env`, or the harness's environment); return (exit status,
    stdout, stderr, its CPU seconds, the server's peak RSS in KiB, sampled while the load
    runs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    deadline = time.monotonic() + duration_s + 60
    peak_rss = 0
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            # argv[3]: the client's name, after `taskset -c CORE`.
            raise MeasureError(f"{argv[3]} did not finish within {duration_s + 60} s")
        peak_rss = max(peak_rss, rss_kib(server_pids))
        time.sleep(RSS_SAMPLE_S)
    stdout, stderr = process.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return process.returncode, stdout, stderr, cpu, peak_rss


def _client_figures(result: dict, client_cpu: float, peak_rss: int) -> dict:
    """Add the figures both clients' summaries share to `result` (which has `requests`
    and `duration_us`): req/s unless given, the client's CPU, whether it was the limit."""
    seconds = result["duration_us"] / 1e6
    result.setdefault("rps", result["requests"] / seconds)
    # Named after wrk, the first client; they hold h2load's figures on the HTTP/2 cases.
    result["wrk_cpu_s"] = round(client_cpu, 3)
    result["wrk_core_share"] = round(client_cpu / seconds, 3)
    result["client_bound"] = client_cpu / seconds >= CLIENT_BOUND_SHARE
    result["server_rss_peak_kib"] = peak_rss
    return result


def run_wrk(argv: list[str], duration_s: int, server_pids: list[int],
            env: dict[str, str] | None = None) -> dict:
    """Run wrk (in `env`: see client_env); return its summary (from report.lua), the CPU
    time wrk used and the server's peak RSS, sampled while the load runs."""
    status, stdout, stderr, cpu, peak_rss = _run_client(argv, duration_s, server_pids, env)
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if status != 0 or not lines:
        output = (stdout + stderr).strip()[-600:]
        raise MeasureError(f"wrk failed (status {status}): {output}")
    result = json.loads(lines[0][len(RESULT_MARKER):])
    result["client"] = "wrk"
    result["socket_errors"] = sum(result[k] for k in
                                  ("connect_errors", "read_errors", "write_errors", "timeouts"))
    return _client_figures(result, cpu, peak_rss)


def h2load_argv(url: str, connections: int, streams: int, duration_s: int,
                headers: dict[str, str], uri_file: Path | None, log: Path | None) -> list[str]:
    """The h2load command line (one thread, on the client core). `url` is the request's
    URL, or with `uri_file` (h2load -i, one path per line) the base URL of the paths;
    `log`: where h2load writes one line per request, to compute the percentiles. Over TLS
    it offers only TLS_GROUP and TLS_CIPHER."""
    argv = ["taskset", "-c", CLIENT_CORE, "h2load", "-t1", f"-c{connections}", f"-m{streams}",
            f"-D{duration_s}"]
    if url.startswith("https:"):
        argv += [f"--groups={TLS_GROUP}", f"--tls13-ciphers={TLS_CIPHER}"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    if log is not None:
        argv.append(f"--log-file={log}")
    if uri_file is not None:
        return argv + ["-B", url, "-i", str(uri_file)]
    return argv + [url]


def _percentiles(log: Path) -> dict:
    """LATENCY_KEYS from h2load's --log-file: tab-separated start time (µs since the epoch),
    status (-1 for a failed stream) and µs until the end of the response, one line per
    request; failed streams have no latency. Nearest-rank percentiles. Also
    `max_after_startup_us`: the longest time of a request started H2LOAD_STARTUP_US or
    more after the first (None when none did)."""
    starts, durations = [], []
    with log.open() as lines:
        for line in lines:
            # More columns may come in later versions: only the first three are read.
            start, status, duration = line.split("\t", 3)[:3]
            if status != "-1":
                starts.append(int(start))
                durations.append(int(duration))
    if not durations:
        return dict.fromkeys([*LATENCY_KEYS, "max_after_startup_us"])
    past_startup = min(starts) + H2LOAD_STARTUP_US
    after_startup = [d for s, d in zip(starts, durations) if s >= past_startup]
    durations.sort()

    def rank(percent: float) -> int:
        return durations[max(0, math.ceil(percent / 100 * len(durations)) - 1)]

    return {"p50_us": rank(50), "p90_us": rank(90), "p99_us": rank(99),
            "p999_us": rank(99.9), "max_us": durations[-1],
            "mean_us": round(sum(durations) / len(durations), 1),
            "max_after_startup_us": max(after_startup, default=None)}


def run_h2load(argv: list[str], duration_s: int, server_pids: list[int], log: Path | None,
               protocol: str, in_flight: int) -> dict:
    """Run h2load; return the keys run_wrk returns, from h2load's summary and its log
    (latencies: None without `log`), and the protocols negotiated. Raises MeasureError
    when h2load did not speak `protocol` (h2, or h2c) or completed no request.
    `in_flight`: its connections × streams, for `mean_over_in_flight_time`."""
    if log is not None:
        # h2load appends to its log file: without this, every run's percentiles, mean
        # and max would include the earlier runs' requests.
        log.unlink(missing_ok=True)
    status, stdout, stderr, cpu, peak_rss = _run_client(argv, duration_s, server_pids, None)
    output = stdout + stderr
    finished, requests = H2LOAD_FINISHED.search(output), H2LOAD_REQUESTS.search(output)
    statuses, alpn = H2LOAD_STATUSES.search(output), H2LOAD_ALPN.search(output)
    if status != 0 or not (finished and requests and statuses):
        raise MeasureError(f"h2load failed (status {status}): {output.strip()[-600:]}")
    # h2load falls back to HTTP/1.1 when the server's ALPN does not offer h2.
    spoken = alpn.group(1) if alpn else "none"
    if spoken != protocol:
        raise MeasureError(f"h2load spoke {spoken}, not {protocol}: {output.strip()[-600:]}")
    tls = H2LOAD_TLS.search(output)
    if tls:
        negotiated = [m.group(1) if m else "nothing" for m in
                      (H2LOAD_CIPHER.search(output), H2LOAD_GROUP.search(output))]
        if negotiated != [TLS_CIPHER, TLS_GROUP]:
            raise MeasureError(f"h2load negotiated {' and '.join(negotiated)}, not "
                               f"{TLS_CIPHER} and {TLS_GROUP}")
    started, done, succeeded, failed, errored, timeouts = map(int, requests.groups()[1:])
    # "errored": streams reset or lost with their connection; "failed" adds to them the
    # responses that are neither 2xx nor 3xx, counted as non2xx below.
    completed = done - errored
    if completed == 0:
        raise MeasureError(f"h2load completed no request: {output.strip()[-600:]}")
    seconds, unit, rps = finished.groups()
    traffic = H2LOAD_TRAFFIC.search(output)
    header_bytes = H2LOAD_HEADERS.search(output)
    result = {
        "client": "h2load",
        "protocol": spoken,
        "tls_version": tls.group(1) if tls else None,
        "requests": completed,
        # h2load's req/s: the responses completed over the -D duration. Its "finished in"
        # time is longer, from the first connection on: the wall time the client's core
        # share is taken over, as wrk's.
        "rps": float(rps),
        "duration_us": round(float(seconds) * H2LOAD_UNITS_US[unit]),
        "bytes": int(traffic.group(1)) if traffic else None,
        # Bytes of HEADERS payload (HPACK blocks) received, over all responses: the
        # client's decoding work per response is header_bytes / requests.
        "header_bytes": int(header_bytes.group(1)) if header_bytes else None,
        "started": started, "done": done, "succeeded": succeeded, "failed": failed,
        "errored": errored, "timeouts": timeouts,
        "status_2xx": int(statuses.group(1)), "status_3xx": int(statuses.group(2)),
        # wrk's count (report.lua) is of statuses above 399 too.
        "non2xx": int(statuses.group(3)) + int(statuses.group(4)),
        "socket_errors": errored + timeouts,
    }
    result.update(_percentiles(log) if log is not None else dict.fromkeys(LATENCY_KEYS))
    # A closed loop keeps `in_flight` requests out, so its mean time per request follows
    # from its req/s: in_flight / rps, of which h2load times a fixed share (about half:
    # a request waits in the client before it is timed, and its response after). The
    # same share for two servers means the mean differs by their req/s alone, not by
    # when a server's responses reach the client.
    mean = result.get("mean_us")
    result["mean_over_in_flight_time"] = (
        round(mean / 1e6 * result["rps"] / in_flight, 3) if mean and result["rps"] else None)
    return _client_figures(result, cpu, peak_rss)


def oha_binary() -> str:
    """oha on PATH, or where `cargo install` puts it."""
    installed = Path.home() / ".cargo" / "bin" / "oha"
    return shutil.which("oha") or str(installed)


def oha_argv(url: str, connections: int, streams: int, duration_s: int, http_version: str,
             headers: dict[str, str], urls_file: Path | None) -> list[str]:
    """The oha command line (one worker thread, on the client core): `connections`
    connections with `streams` requests in flight on each, over HTTP/`http_version` (2:
    h2 by ALPN; 3: QUIC), for `duration_s`. `url` is the request's URL, or with
    `urls_file` (one URL per line) none: each request draws one of the file's at random.
    oha's own Accept-Encoding is left out; `headers` may set one."""
    argv = ["taskset", "-c", CLIENT_CORE, oha_binary(), "--no-tui", "--insecure",
            "--http-version", http_version, "-c", str(connections), "-p", str(streams),
            "-z", f"{duration_s}s", "--worker-threads", "1", "--disable-compression",
            "--output-format", "json"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    return argv + (["--urls-from-file", str(urls_file)] if urls_file else [url])


def run_oha(argv: list[str], duration_s: int, server_pids: list[int], protocol: str,
            wait_s: float) -> dict:
    """Run oha; return the keys run_wrk returns, and "server_cpu_s": the server's CPU
    over the `duration_s` window alone.

    oha stops sending at the end of its window, but over HTTP/3 it exits only once the
    server has ended its connections (after the server's idle timeout): its own rate is
    over that longer time. Here requests are its 200s (and other statuses) counted over
    the window, and the server's CPU is read at the window's end. `wait_s`: how long oha
    may take to exit after its window before it is killed and the run fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = cpu_seconds(server_pids)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    window_end = time.monotonic() + duration_s
    peak_rss = 0
    while time.monotonic() < window_end and process.poll() is None:
        peak_rss = max(peak_rss, rss_kib(server_pids))
        time.sleep(min(RSS_SAMPLE_S, max(0.0, window_end - time.monotonic())))
    server_cpu = cpu_seconds(server_pids) - cpu_before
    try:
        stdout, stderr = process.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise MeasureError(f"oha did not exit within {wait_s:g} s after its "
                           f"{duration_s} s run")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = None
    if process.returncode != 0 or report is None:
        output = (stdout + stderr).strip()[-600:]
        raise MeasureError(f"oha failed (status {process.returncode}): {output}")
    statuses = {int(code): count for code, count in report["statusCodeDistribution"].items()}
    # oha cancels the requests in flight at the end of its window: not failures.
    errors = {what: count for what, count in report["errorDistribution"].items()
              if what != "aborted due to deadline"}
    completed = sum(statuses.values())
    if completed == 0:
        raise MeasureError(f"oha completed no request: {report['errorDistribution']}")
    latencies = report["latencyPercentiles"]
    summary = report["summary"]

    def us(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * 1e6, 1)

    result = {
        "client": "oha",
        "protocol": protocol,
        "requests": completed,
        "rps": completed / duration_s,
        "duration_us": duration_s * 1_000_000,
        "bytes": summary.get("totalData"),
        "header_bytes": None,
        "status_2xx": sum(n for code, n in statuses.items() if 200 <= code < 300),
        "non2xx": sum(n for code, n in statuses.items() if code >= 400),
        "socket_errors": sum(errors.values()),
        "errors": errors,
        "p50_us": us(latencies.get("p50")), "p90_us": us(latencies.get("p90")),
        "p99_us": us(latencies.get("p99")), "p999_us": us(latencies.get("p99.9")),
        "max_us": us(summary.get("slowest")), "mean_us": us(summary.get("average")),
        "server_cpu_s": server_cpu,
    }
    return _client_figures(result, client_cpu, peak_rss)


class IdleHolder:
    """bench/lib/idle_conns.py on the client core, holding idle keep-alive connections:
    `protocol` h1 (HTTP/1.1), tls (HTTP/1.1 over TLS), h2 (over TLS) or h3 (QUIC)."""

    FLAGS = {"h1": [], "tls": ["--tls"], "h2": ["--http2"], "h3": ["--http3"]}

    def __init__(self, port: int, count: int, path: str, protocol: str, timeout_s: float,
                 env: dict[str, str] | None):
        script = Path(__file__).with_name("idle_conns.py")
        self.process = subprocess.Popen(
            ["taskset", "-c", CLIENT_CORE, sys.executable, str(script), "127.0.0.1",
             str(port), str(count), "--path", path, "--timeout", str(timeout_s),
             *self.FLAGS[protocol]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )

    def _expect(self, word: str) -> int:
        line = self.process.stdout.readline().split()
        if len(line) != 2 or line[0] != word:
            self.process.kill()
            self.process.wait()
            raise MeasureError(f"idle_conns.py: expected {word}, got {' '.join(line) or 'EOF'}")
        return int(line[1])

    def wait_open(self) -> int:
        """Block until the holder has opened its connections; return how many it holds."""
        return self._expect("OPEN")

    def finish(self) -> int:
        """Ask the holder how many connections the server kept open, then let it exit."""
        self.process.stdin.write("check\n")
        self.process.stdin.flush()
        still_open = self._expect("STILL_OPEN")
        self.process.wait(timeout=60)
        return still_open


def start_strace(pids: list[int], output: Path) -> subprocess.Popen:
    """Attach `strace -c -f` to the server's processes (counts only, no per-call log)."""
    argv = ["strace", "-c", "-f", "-o", str(output)]
    for pid in pids:
        argv += ["-p", str(pid)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    # strace announces each attached process on stderr, or the failure to attach to one
    # that exited since the tree was listed (h2o's short-lived helpers over TLS): wait for
    # a word about each of them.
    answered = 0
    while answered < len(pids):
        line = process.stderr.readline()
        if not line:
            raise MeasureError(f"strace exited with status {process.wait()} before attaching")
        answered += "attached" in line or "No such process" in line
    return process


def stop_strace(process: subprocess.Popen, output: Path) -> dict[str, int]:
    """Detach strace and parse its summary table into {syscall: calls, "total": calls}."""
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    process.stderr.close()
    calls = {}
    for line in output.read_text().splitlines():
        parts = line.split()
        # Table rows: % time, seconds, usecs/call, calls, [errors], syscall.
        if len(parts) >= 5 and parts[3].isdigit():
            calls[parts[-1]] = int(parts[3])
    if "total" not in calls:
        raise MeasureError(f"no summary table in strace output {output}")
    return calls
