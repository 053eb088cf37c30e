#!/usr/bin/env python3
"""The report of bench/cluster/run (standard library only):

    report.py report --runs DIR ... --out FILE      bench/CLUSTER.md from a run's results

The report reads, per rollout (runs/pack, runs/restart): wrk's CLUSTER_RESULT line
(load.lua), events.tsv (the orchestration's timestamped steps), HAProxy's `show stat` at
the end, kiln's /metrics of every node, and the HAProxy and kiln logs.
"""

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

# What the machine is, described as bench/run describes it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from prepare import machine  # noqa: E402

# The rollouts bench/cluster/run knows, in report order (a run may make only some).
MODES = ["pack", "restart", "delay", "sigterm"]
# Failed: any response that is not 200, and every socket error or timeout wrk counts.
ERROR_KEYS = ["connect_errors", "read_errors", "write_errors", "timeouts"]


def parse_stat(text: str) -> list[dict]:
    """HAProxy's `show stat` CSV (its header starts with `# `), one dict per line."""
    text = text.lstrip("# ")
    return [row for row in csv.DictReader(io.StringIO(text)) if row.get("pxname")]


# -------------------------------------------------------------------------------------
# Reading a run's results

def read_wrk(path: Path) -> dict:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("CLUSTER_RESULT "):
            result = json.loads(line.split(" ", 1)[1])
            break
    else:
        raise SystemExit(f"report.py: no CLUSTER_RESULT line in {path}")
    # Merge the per-thread flat tables of load.lua (one thread in this bench, but stay
    # general); keys as load.lua documents them.
    merged = {"versions": {}, "statuses": {}, "torn": 0, "unversioned": 0,
              "first": {}, "last": {}, "timeline": {}, "start": None}
    for t in result.pop("threads"):
        start = t["start"]
        merged["start"] = start if merged["start"] is None else min(merged["start"], start)
        for key, value in t.items():
            kind, _, rest = key.partition(":")
            if kind == "v":
                merged["versions"][rest] = merged["versions"].get(rest, 0) + int(value)
            elif kind == "s":
                merged["statuses"][rest] = merged["statuses"].get(rest, 0) + int(value)
            elif kind in ("torn", "unversioned"):
                merged[kind] += int(value)
            elif kind == "first":
                merged["first"][rest] = min(value, merged["first"].get(rest, float("inf")))
            elif kind == "last":
                merged["last"][rest] = max(value, merged["last"].get(rest, 0.0))
            elif kind == "t":
                # Seconds relative to the thread's start; absolute here.
                second, _, version = rest.partition(":")
                slot = merged["timeline"].setdefault(int(int(second) + start), {})
                slot[version] = slot.get(version, 0) + int(value)
    result.update(merged)
    for key in ("requests", "duration_us", "bytes", "status_errors", *ERROR_KEYS):
        result[key] = int(result[key])
    non200 = sum(result["statuses"].values())
    result["non200"] = non200
    result["socket_errors"] = sum(result[k] for k in ERROR_KEYS)
    result["failed"] = non200 + result["socket_errors"]
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def read_events(path: Path) -> list[dict]:
    events = []
    for line in path.read_text().splitlines():
        t, name, node, detail = (line.split("\t") + ["", "", ""])[:4]
        events.append({"t": float(t), "event": name, "node": node, "detail": detail})
    return events


def read_metrics(path: Path) -> dict:
    """The few kiln counters the report shows, summed over their labels."""
    out = {"requests": {}, "reloads": 0, "reload_failures": 0, "timeouts": 0}
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r'^(\w+)(\{[^}]*\})?\s+(\S+)$', line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "kiln_requests_total":
            status = re.search(r'status="(\w+)"', labels)
            key = status.group(1) if status else "?"
            out["requests"][key] = out["requests"].get(key, 0) + int(value)
        elif name == "kiln_site_reloads_total":
            out["reloads"] += int(value)
        elif name == "kiln_site_reload_failures_total":
            out["reload_failures"] += int(value)
        elif name == "kiln_timeouts_total":
            out["timeouts"] += int(value)
    return out


def read_run(run: Path) -> dict:
    events = read_events(run / "events.tsv")
    stat = parse_stat((run / "haproxy-stat.csv").read_text())
    servers = {r["svname"]: r for r in stat if r["pxname"] == "kiln"
               and r["svname"] not in ("FRONTEND", "BACKEND")}
    backend = next(r for r in stat if r["pxname"] == "kiln" and r["svname"] == "BACKEND")
    frontend = next(r for r in stat if r["pxname"] == "www" and r["svname"] == "FRONTEND")
    nodes = sorted(servers)
    metrics = {n: read_metrics(run / f"metrics-{n}.txt") for n in nodes}
    metrics_before = {n: read_metrics(run / f"metrics-{n}-v1.txt") for n in nodes}
    haproxy_log = (run / "haproxy.log").read_text(errors="replace").splitlines() \
        if (run / "haproxy.log").exists() else []
    kiln_logs = {n: (run / f"kiln-{n}.log").read_text(errors="replace").splitlines()
                 for n in nodes if (run / f"kiln-{n}.log").exists()}
    # The settings that matter, as HAProxy ran them (comments and boilerplate left out).
    wanted = ("balance", "http-reuse", "option httpchk", "http-check", "default-server",
              "retries", "option redispatch", "retry-on", "timeout connect", "timeout server")
    cfg = [line.strip() for line in (run / "haproxy.cfg").read_text().splitlines()
           if line.strip().startswith(wanted)]
    return {"wrk": read_wrk(run / "wrk.out"), "haproxy_cfg": cfg, "events": events, "servers": servers,
            "backend": backend, "frontend": frontend, "nodes": nodes, "metrics": metrics,
            "metrics_before": metrics_before, "haproxy_log": haproxy_log,
            "kiln_logs": kiln_logs}


def at(events: list[dict], name: str, node: str = "") -> float | None:
    for e in events:
        if e["event"] == name and e["node"] == node:
            return e["t"]
    return None


def node_times(run: dict) -> list[dict]:
    """Per node: each step's time, relative to the rollout's start."""
    ev = run["events"]
    t0 = at(ev, "rollout_start")
    rows = []
    for node in run["nodes"]:
        row = {"node": node}
        for e in ev:
            if e["node"] == node:
                row[e["event"]] = e["t"] - t0
                if e["detail"]:
                    row[e["event"] + "_detail"] = e["detail"]
        rows.append(row)
    return rows


def summarize(run: dict) -> dict:
    ev, w = run["events"], run["wrk"]
    t0 = at(ev, "rollout_start")
    served = [at(ev, "serves_v2", n) for n in run["nodes"]]
    first_v2 = w["first"].get("2")
    last_v1 = w["last"].get("1")
    hs = run["servers"]
    return {
        "requests": w["requests"],
        "failed": w["failed"],
        "non200": w["non200"],
        "statuses": w["statuses"],
        "socket_errors": {k: w[k] for k in ERROR_KEYS},
        "torn": w["torn"],
        "unversioned": w["unversioned"],
        "v1": w["versions"].get("1", 0),
        "v2": w["versions"].get("2", 0),
        "rps": w["rps"],
        "duration_s": w["duration_us"] / 1e6,
        "p50_ms": w["p50_us"] / 1000, "p90_ms": w["p90_us"] / 1000,
        "p99_ms": w["p99_us"] / 1000, "p999_ms": w["p999_us"] / 1000,
        "max_ms": w["max_us"] / 1000,
        "all_v2_s": (max(served) - t0) if None not in served else None,
        "first_v2_s": (first_v2 - t0) if first_v2 else None,
        "last_v1_s": (last_v1 - t0) if last_v1 else None,
        "load_start_s": at(ev, "load_start") - t0,
        "load_end_s": at(ev, "load_end") - t0,
        "rollout_end_s": at(ev, "rollout_end") - t0,
        "retries": sum(int(s["wretr"] or 0) for s in hs.values()),
        "redispatches": sum(int(s["wredis"] or 0) for s in hs.values()),
        "conn_errors": sum(int(s["econ"] or 0) for s in hs.values()),
        "resp_errors": sum(int(s["eresp"] or 0) for s in hs.values()),
        "lb_5xx": int(run["frontend"]["hrsp_5xx"] or 0),
        "lb_4xx": int(run["frontend"]["hrsp_4xx"] or 0),
        "kiln_responses": sum(n for m in (*run["metrics"].values(),
                                          *run["metrics_before"].values())
                              for n in m["requests"].values()),
        "kiln_not_2xx": sum(n for m in (*run["metrics"].values(),
                                        *run["metrics_before"].values())
                            for k, n in m["requests"].items() if k != "2xx"),
        "kiln_warnings": [f"{node}: {line}" for node, lines in run["kiln_logs"].items()
                          for line in lines if " WARN " in line or " ERROR " in line],
        "timeline": w["timeline"],
        "t0": t0,
    }


# -------------------------------------------------------------------------------------
# Machine and versions

def first_line(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unavailable ({err})"
    lines = [x for x in (done.stdout + done.stderr).splitlines() if x.strip()]
    return lines[0].strip() if lines else "unknown"


# -------------------------------------------------------------------------------------
# The report

def ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1000:,.0f} ms"


def secs(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} s"


def between(row: dict, a: str, b: str) -> str:
    return ms(row[b] - row[a]) if a in row and b in row else "–"


def failed_cell(s: dict) -> str:
    if s["failed"] == 0:
        return "**0**"
    parts = [f"{n}× {code}" for code, n in sorted(s["statuses"].items())]
    parts += [f"{n} {k.replace('_', ' ')}" for k, n in s["socket_errors"].items() if n]
    return f"**{s['failed']}** ({', '.join(parts)})"


METHOD = {
    "pack": "`cp v2.pack nI/.site.pack.new && mv -f nI/.site.pack.new nI/site.pack`; then "
            "`/version.txt` is polled on the node itself (bypassing HAProxy, every 20 ms) "
            "until it says v2.",
    "restart": "`set server kiln/nI state drain` on the runtime API; wait until `show stat` "
               "gives the node 0 current sessions; SIGTERM kiln and wait for its exit; copy "
               "v2's pack in place and start kiln again; wait for `/ready` = 200, then let "
               "two health checks (rise 2 × 200 ms) run against the new process and wait "
               "for HAProxy to see the node up; `set server kiln/nI state ready`. "
               "(`--modes sigterm` measures the same without the drain.)",
    "delay": "as **restart** without the runtime API, the servers started with "
             "`--shutdown-delay 1`: SIGTERM kiln, nothing else; its `/ready` answers 503 at "
             "once while it goes on serving for 1 s, HAProxy's checks (fall 2 × 200 ms) take "
             "it out, then it closes its listener and drains; start kiln again on v2, wait "
             "for `/ready` and for HAProxy to see it up (what an orchestrator that only sends "
             "SIGTERM gets, Kubernetes for one).",
    "sigterm": "(an experiment, not part of the default run) as **delay** without "
               "`--shutdown-delay`: SIGTERM kiln, nothing else, so HAProxy learns of the "
               "stop from its checks and from whatever its requests to the node meet; start "
               "kiln again on v2, wait for `/ready` and for HAProxy to see it up.",
}


def node_table(mode: str, rows: list[dict]) -> list[str]:
    out = []
    if mode == "pack":
        out.append("| node | rename at | serves v2 at | rename → serving v2 |")
        out.append("|---|--:|--:|--:|")
        for r in rows:
            out.append(f"| {r['node']} | {secs(r.get('renamed'))} | "
                       f"{secs(r.get('serves_v2'))} | {between(r, 'renamed', 'serves_v2')} |")
        out.append("")
        out.append("(\"serves v2\" is the first 20 ms poll that saw it: the reload itself is "
                   "at most that much shorter.)")
    elif mode == "restart":
        out.append("| node | drain set at | sessions 0 after | SIGTERM → exit (status) | "
                   "start → /ready | → UP in HAProxy | back in rotation at | "
                   "out of rotation for |")
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            out.append(f"| {r['node']} | {secs(r.get('drain_set'))} | "
                       f"{between(r, 'drain_set', 'idle')} | {between(r, 'idle', 'exited')} "
                       f"({r.get('exited_detail', '?')}) | {between(r, 'exited', 'ready')} | "
                       f"{between(r, 'ready', 'up')} | {secs(r.get('ready_set'))} | "
                       f"{between(r, 'drain_set', 'ready_set')} |")
        out.append("")
        out.append("(SIGTERM → exit includes the 20 ms polling of the exit; start → /ready "
                   "includes copying the pack and kiln's start; → UP includes the 400 ms "
                   "left for two checks of the new process.)")
    else:
        out.append("| node | SIGTERM at | → exit (status) | start → /ready | → UP in HAProxy "
                   "| serves v2 at |")
        out.append("|---|--:|--:|--:|--:|--:|")
        for r in rows:
            out.append(f"| {r['node']} | {secs(r.get('node_start'))} | "
                       f"{between(r, 'node_start', 'exited')} ({r.get('exited_detail', '?')}) "
                       f"| {between(r, 'exited', 'ready')} | {between(r, 'ready', 'up')} | "
                       f"{secs(r.get('serves_v2'))} |")
    return out


def write_report(args, runs: dict[str, dict], summaries: dict[str, dict], info: dict) -> str:
    modes = [m for m in MODES if m in runs]
    lines: list[str] = []
    w = lines.append
    w("# Rolling deploy across three kiln servers behind HAProxy")
    w("")
    w("A site in version 1 served by three kiln servers behind HAProxy; version 2 rolled out")
    w("to one node after the other while a client loads the balancer: a **pack** rollout (the")
    w("new pack renamed over the served one: kiln reloads it in place), a **restart** rollout")
    w("(each node drained in HAProxy, stopped with SIGTERM and started again on version 2, as")
    w("a binary upgrade or a change of flags needs) and a **delay** rollout (the same restart")
    w("with SIGTERM alone: kiln's `--shutdown-delay` and `/ready` take it out of rotation")
    w("before it closes its listener). Everything here")
    w("comes from one run of `bench/cluster/run` (it rewrites this file); the figures are that")
    w(f"run's ({info['finished']}).")
    w("")
    w("## Machine and method")
    w("")
    m = info["machine"]
    w(f"- {m['nproc']} CPUs ({m['cpu_model']}), {round(m['memory_mib'] / 1024)} GiB RAM, "
      f"Linux {m['kernel']}. "
      f"Load average (1, 5, 15 min): {info['load_start']} at the start, {info['load_end']} "
      "at the end.")
    w(f"- **One machine, {m['nproc']} cores shared by everything**: the three kiln servers "
      "(one event-loop thread each), HAProxy (one thread) and the load client all run on the "
      "same cores, and other work on the machine may run there too (see the load average). "
      "The \"network\" is loopback and veth pairs between network namespaces: no real NIC, "
      "no real latency. Requests per second here say how fast this whole stack goes on two "
      "cores, not how fast a kiln server is (bench/RESULTS.md has that); the figures that "
      "carry over are the failure counts and the order and timing of the rollout's steps.")
    origin = (f"built from the repository at commit {info['commit']}" if args.built else
              f"given with `--kiln`, so its source commit is not known here; the "
              f"repository was at commit {info['commit']}")
    w(f"- Versions: {info['kiln_version']} (`{info['kiln']}`, {origin}), {info['haproxy']}, "
      f"{info['wrk']}.")
    w("- Topology: network namespaces `kiln-n1`..`kiln-n3`, each with a veth pair to the root "
      "namespace (`10.77.I.1/30` on the host, `10.77.I.2/30` in node I, loopback up). In "
      "each, `kiln serve site.pack --listen 0.0.0.0:8080 --metrics 0.0.0.0:9090 --user root "
      "--threads 1` (connection layer `--io auto`), the pack in a folder of its own per node. "
      "HAProxy in the root namespace on `127.0.0.1:18780`, its runtime API on "
      "`127.0.0.1:18781`.")
    cfg = runs[modes[0]]["haproxy_cfg"]
    w(f"- HAProxy (`{args.template}`, one thread): " + ", ".join(f"`{x}`" for x in cfg) + ".")
    w("- Site: four pages (`/`, `/about/`, `/version.txt`, `/style.css`) and a 404 page, "
      "each body naming its version (`site-version:N`) and every response carrying "
      "`X-Site-Version: N` (from `_headers`); built with `kiln build`.")
    w(f"- Load: `wrk -t1 -c{args.connections} -d{args.seconds}s --timeout 2s` through "
      f"HAProxy, cycling over `{args.paths}`, with `bench/cluster/load.lua`, which reads "
      "every response: versions counted (header and body must agree: a disagreement counts "
      "as a torn response), every status other than 200 counted, the wall-clock time of "
      "the first v2 and the last v1 response kept. **Failed** = responses other than 200 + "
      "wrk's socket errors (connect, read, write) + timeouts. Latency percentiles are wrk's, "
      "over the whole run (rollout included).")
    w(f"- Each rollout is its own run on freshly started servers on v1. The rollout starts "
      f"{args.warmup:g} s into the load; nodes are rolled in order n1, n2, n3, with a pause "
      f"of {args.pause:g} s between a node serving v2 and the next node's start.")
    for mode in modes:
        w(f"  - **{mode}**: {METHOD[mode]}")
    w("- Every wait is bounded (10 s, 15 s for an exit); a wait that times out fails the run.")
    w("")
    w("## Results")
    w("")
    w("Times are from the start of the rollout (the first node's first step).")
    w("")
    w("| rollout | requests | failed | requests/s | p50 | p99 | max | all nodes on v2 | "
      "first v2 via HAProxy | last v1 via HAProxy |")
    w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for mode in modes:
        s = summaries[mode]
        w(f"| {mode} | {s['requests']:,} | {failed_cell(s)} | {s['rps']:,.0f} | "
          f"{s['p50_ms']:.2f} ms | {s['p99_ms']:.2f} ms | {s['max_ms']:.1f} ms | "
          f"{secs(s['all_v2_s'])} | {secs(s['first_v2_s'])} | {secs(s['last_v1_s'])} |")
    w("")
    w("What else the balancer and the servers counted (HAProxy's `show stat` at the end of "
      "each run, kiln's `/metrics` of every node at the end):")
    w("")
    w("| rollout | v1 / v2 responses | torn | HAProxy retries | redispatches | "
      "connection errors | response errors | HAProxy 5xx | kiln responses (not 2xx) | "
      "kiln reloads (failed) |")
    w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for mode in modes:
        s, r = summaries[mode], runs[mode]
        reloads = sum(x["reloads"] for x in r["metrics"].values())
        failures = sum(x["reload_failures"] for x in r["metrics"].values())
        w(f"| {mode} | {s['v1']:,} / {s['v2']:,} | {s['torn']} | {s['retries']} | "
          f"{s['redispatches']} | {s['conn_errors']} | {s['resp_errors']} | {s['lb_5xx']} | "
          f"{s['kiln_responses']:,} ({s['kiln_not_2xx']}) | {reloads} ({failures}) |")
    w("")
    w("(kiln's responses are summed over every process that ran, the restarted ones "
      "scraped just before their SIGTERM: after the drain in the restart rollout.)")
    w("")
    for mode in modes:
        w(f"### {mode.capitalize()} rollout, per node")
        w("")
        for line in node_table(mode, node_times(runs[mode])):
            w(line)
        w("")
    w("### Responses per second and version through HAProxy")
    w("")
    w("Seconds from the start of the load (the rollout starts at "
      f"{args.warmup:g} s); each cell is `v1 / v2` responses in that second.")
    w("")
    w("| second | " + " | ".join(modes) + " |")
    w("|--:|" + "--:|" * len(modes))
    bases = {mode: min(summaries[mode]["timeline"], default=0) for mode in modes}
    seconds = max(len(summaries[mode]["timeline"]) for mode in modes)
    for sec in range(seconds + 1):
        cells = []
        for mode in modes:
            b = summaries[mode]["timeline"].get(bases[mode] + sec)
            cells.append("" if b is None else f"{b.get('1', 0):,} / {b.get('2', 0):,}")
        if any(cells):
            w(f"| {sec} | " + " | ".join(cells) + " |")
    w("")
    w("## Reading")
    w("")
    for para in reading(summaries, runs, args, modes):
        w(para)
        w("")
    w("## How to run")
    w("")
    w("```sh")
    w("bench/cluster/run                         # as root; builds kiln (cargo build --release)")
    w("bench/cluster/run --kiln PATH --seconds 30")
    w("```")
    w("")
    w("It needs root (network namespaces), iproute2, `/usr/sbin/haproxy`, wrk, curl and "
      "python3 (`apt-get install -y haproxy wrk curl iproute2`), and removes everything it "
      "made (processes, namespaces, veths, its temp dir) on exit, error or Ctrl-C; a run "
      "killed outright is cleaned up by the next. The last run's raw results (wrk output, "
      "events, HAProxy's configuration, stats and log, every kiln's log and metrics, "
      "`results.json`) stay in `bench/cluster/work/last/`. `--modes pack,restart,delay,sigterm` "
      "adds the SIGTERM-only experiment and `--haproxy-template FILE` tries another "
      "HAProxy configuration; either writes its report to `bench/cluster/work/` instead "
      "of this file.")
    return "\n".join(lines) + "\n"


def reading(summaries: dict, runs: dict, args, modes: list[str]) -> list[str]:
    """The short reading: what the numbers say, written from the numbers."""
    out = []
    for mode in modes:
        s, run = summaries[mode], runs[mode]
        name = f"The {mode} rollout"
        absorbed = ""
        if s["retries"] or s["redispatches"]:
            absorbed = (f" HAProxy retried {s['retries']} time(s) and redispatched "
                        f"{s['redispatches']} request(s) to another node (connection "
                        f"errors {s['conn_errors']}, response errors {s['resp_errors']})")
            absorbed += (": failures between HAProxy and a node that its retry settings "
                         "absorbed." if s["failed"] == 0 else ".")
        if s["failed"] == 0 and s["torn"] == 0:
            if not absorbed:
                absorbed = (" HAProxy needed no retry and no redispatch either: no request "
                            "reached a node that could not answer it.")
            out.append(f"**{name} failed no request** ({s['requests']:,} served, no status "
                       "other than 200, no socket error, no timeout, no torn response)."
                       + absorbed)
            continue
        text = (f"**{name} had {s['failed']} failed request(s)** ({failed_cell(s)}; torn "
                f"responses: {s['torn']}).{absorbed}")
        per_node = [f"{n}: {v['eresp']} response errors, {v['econ']} connection errors, "
                    f"{v['srv_abrt']} aborted by the server"
                    for n, v in sorted(run["servers"].items())
                    if int(v["eresp"] or 0) or int(v["econ"] or 0) or int(v["srv_abrt"] or 0)]
        if per_node:
            text += " HAProxy's counters by node: " + "; ".join(per_node) + "."
        logs = [ln for ln in run["haproxy_log"] if '"GET ' in ln and " 200 " not in ln]
        if logs:
            text += (" HAProxy's log lines for them (the termination state, four letters "
                     "after the header captures, says which side ended the exchange and "
                     "when):\n\n```\n" + "\n".join(logs[:8]) + "\n```")
        else:
            text += (" HAProxy logged no failed request: when a server closes a reused "
                     "connection without answering and HAProxy may not retry, it closes the "
                     "client's connection silently, as the server would have, and wrk counts "
                     "a read error.")
        out.append(text)
    warnings = [(m, summaries[m]["kiln_warnings"]) for m in modes
                if summaries[m]["kiln_warnings"]]
    if warnings:
        out.append("**kiln logged warnings or errors**: " + "; ".join(
            f"{m}: {len(ws)}, the first `{ws[0]}`" for m, ws in warnings) + ".")
    else:
        out.append("kiln logged no warning and no error in any run.")
    if "pack" in summaries:
        p = summaries["pack"]
        out.append(
            f"**Time to roll out.** With the pack, every node served v2 {secs(p['all_v2_s'])} "
            f"after the rollout began; {2 * args.pause:g} s of that are the two pauses "
            "between nodes, the rest is kiln noticing the rename (inotify), verifying the new "
            "pack and swapping it in, as a 20 ms poll sees it (per node above).")
    if "restart" in summaries:
        r = summaries["restart"]
        out.append(
            f"The restart rollout took {secs(r['all_v2_s'])}: besides the pauses, each node "
            "waits for its sessions to drain, for kiln to exit, for the new process to start "
            "and for two health checks before it rejoins; meanwhile the cluster runs on two "
            "nodes.")
    firsts = ", ".join(f"{secs(summaries[m]['first_v2_s'])} ({m})" for m in modes)
    lasts = ", ".join(f"{secs(summaries[m]['last_v1_s'])} ({m})" for m in modes)
    out.append(
        f"**Mixed versions.** Through the balancer, v2 first appeared {firsts} after the "
        f"rollout began, and v1 last {lasts}: in between, as in any rolling deploy, both "
        "versions are served and a client may get v2 and then v1 (round robin, no "
        "stickiness). A deploy that needs one version per client needs stickiness or a "
        "cut-over at the balancer instead.")
    figures = "; ".join(f"{m}: {summaries[m]['rps']:,.0f} requests/s, p99 "
                        f"{summaries[m]['p99_ms']:.2f} ms, max {summaries[m]['max_ms']:.1f} ms"
                        for m in modes)
    out.append(
        f"**Throughput and latency** ({figures}). On two shared cores the client, HAProxy "
        "and the servers compete for the CPU, so these mostly measure that contention (wrk "
        "with a Lua `response()` callback is itself a large share of it); a node out of "
        "rotation leaves more CPU to the others, so a restart does not show as lost capacity "
        "here as it would on separate machines. The figures vary from run to run with the "
        "machine's other load.")
    return out


def report(args) -> int:
    runs_dir = Path(args.runs)
    runs = {mode: read_run(runs_dir / mode) for mode in MODES if (runs_dir / mode).is_dir()}
    summaries = {mode: summarize(run) for mode, run in runs.items()}
    load_start = (runs_dir / "loadavg-start").read_text().split()[:3] \
        if (runs_dir / "loadavg-start").exists() else ["?"] * 3
    info = {
        "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_start": " ".join(load_start),
        "load_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "kiln": args.kiln,
        "kiln_version": first_line([args.kiln, "--version"]),
        "commit": first_line(["git", "-C", args.repo, "rev-parse", "--short", "HEAD"]),
        "haproxy": first_line(["/usr/sbin/haproxy", "-v"]).split(" - ")[0],
        "wrk": first_line(["wrk", "--version"]).split(" Copyright")[0],
    }
    Path(args.out).write_text(write_report(args, runs, summaries, info))
    if args.json:
        keep = {}
        for mode, s in summaries.items():
            keep[mode] = dict(s, nodes=node_times(runs[mode]),
                              haproxy_servers=runs[mode]["servers"],
                              kiln_metrics=runs[mode]["metrics"])
        Path(args.json).write_text(json.dumps({"info": info, "runs": keep}, indent=1,
                                              default=str) + "\n")
    for mode, s in summaries.items():
        print(f"cluster: {mode:8} requests {s['requests']:,} failed {s['failed']} "
              f"({s['rps']:,.0f}/s, p99 {s['p99_ms']:.2f} ms), all on v2 after "
              f"{secs(s['all_v2_s'])}, first v2 {secs(s['first_v2_s'])}, last v1 "
              f"{secs(s['last_v1_s'])}, HAProxy retries {s['retries']} redispatches "
              f"{s['redispatches']}", file=sys.stderr)
    return 0 if all(s["failed"] == 0 and s["torn"] == 0 for s in summaries.values()) else 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--runs", required=True)
    rep.add_argument("--kiln", required=True)
    rep.add_argument("--built", action="store_true",
                     help="kiln was built from --repo by bench/cluster/run")
    rep.add_argument("--repo", required=True)
    rep.add_argument("--template", required=True, help="the HAProxy template, as shown")
    rep.add_argument("--seconds", type=int, required=True)
    rep.add_argument("--connections", type=int, required=True)
    rep.add_argument("--paths", required=True)
    rep.add_argument("--warmup", type=float, required=True)
    rep.add_argument("--pause", type=float, required=True)
    rep.add_argument("--json")
    rep.add_argument("--out", required=True)
    return report(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
