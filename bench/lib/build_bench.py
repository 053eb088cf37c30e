#!/usr/bin/env python3
"""Measures `kiln build` and `kiln serve DIR --watch` and writes bench/BUILD.md.

Everything in the report comes from one run on one machine: the baselines (`tar` piped
into `gzip -9` of the same tree), clean kiln builds at both compression levels,
incremental builds after changing one file and 10 % of the files, builds from
archives, the live preview's start and reload, and pack open times. Wall, CPU and peak
RSS come from GNU time (`/usr/bin/time`); sizes from kiln's build summary. Every timed
step runs a few times and the median is reported (clean builds at maximum compression
once: they take a minute). When a goal is missed, the build behind it is recorded again
under `perf record -e cpu-clock` and the report lists the functions that took the time.

Run it through bench/build_bench.sh, which builds kiln first.
"""

import argparse
import http.client
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Where Debian's python3.11-doc package installs the HTML documentation.
PYDOCS_SOURCE = Path("/usr/share/doc/python3.11/html")
# The tiles corpus: size and seed given to gen_tiles.py (as bench/lib/corpora.py).
TILE_COUNT = 100_000
TILE_SEED = 1
# The page changed by the one-file builds: a typical page (130 KB), and the largest.
PYDOCS_PAGE = "tutorial/controlflow.html"
PYDOCS_LARGEST = "contents.html"
# The tile changed by the one-file builds.
TILE = "8/100/100.png"
# Runs of each timed step; the median is reported.
REPEAT = 3
# Runs of the preview's reload after a change.
RELOADS = 5
# The goals of issue 11, as (key, text, limit, unit).
GOALS = [
    ("py_one", "Python docs, one page changed: rebuild", 1.0, "s"),
    ("py_tenth", "Python docs, 10 % of files changed: rebuild", 10.0, "s"),
    ("tiles_clean", "tiles, clean build (warm cache)", 3.0, "s"),
    ("tiles_tar_rss", "tiles, build from a tar: peak RSS", 256.0, "MiB"),
    ("preview_start", "preview of the Python docs: start", 1.5, "s"),
    ("preview_reload", "preview: a one-file change served (worst of 5)", 0.5, "s"),
]
# GNU time's format: a marker, then wall and CPU seconds and peak RSS in KiB.
TIME_FORMAT = "KILN_BENCH %e %U %S %M"


@dataclass
class Run:
    """One timed command."""

    wall: float
    user: float
    sys: float
    rss_kib: int
    stdout: str

    @property
    def rss_mib(self) -> float:
        return self.rss_kib / 1024


@dataclass
class Step:
    """The runs of one measured step, and what its (last) build summary said."""

    runs: list[Run] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)

    @property
    def summary(self) -> dict:
        return parse_summary(self.runs[-1].stdout)


def timed(cmd: list[str]) -> Run:
    """Runs `cmd` under GNU time; fails loudly if it fails."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", TIME_FORMAT, "-o", out.name, *cmd],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        line = next(l for l in out.read().splitlines() if l.startswith("KILN_BENCH"))
    wall, user, system, rss = line.split()[1:]
    return Run(float(wall), float(user), float(system), int(rss), proc.stdout)


def parse_summary(text: str) -> dict:
    """The figures of a `kiln build` summary."""
    out = {}
    for name in ("identity", "br", "zstd", "gzip"):
        m = re.search(rf"^{name}\s+(\d+)\s+(\d+) bytes", text, re.M)
        if m:
            out[name] = (int(m.group(1)), int(m.group(2)))
    m = re.search(r"^encodings\s+(\d+)\s+compressed, (\d+) reused", text, re.M)
    if m:
        out["compressed"], out["reused"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"^pack\s+(\d+) bytes", text, re.M)
    if m:
        out["pack"] = int(m.group(1))
    m = re.search(r"^files\s+(\d+)\s+(\d+) bytes", text, re.M)
    if m:
        out["files"], out["bytes_in"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"^routes\s+(\d+)", text, re.M)
    if m:
        out["routes"] = int(m.group(1))
    return out


def files_under(root: Path) -> list[Path]:
    """Every regular file under `root`, sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file())


def warm(root: Path) -> None:
    """Reads every file once, so that builds measure a warm page cache."""
    for p in files_under(root):
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


class Editor:
    """Changes files of a tree, each time with new bytes."""

    def __init__(self) -> None:
        self.edits = 0

    def edit(self, paths: list[Path]) -> None:
        self.edits += 1
        mark = f"\n<!-- kiln bench edit {self.edits} -->\n".encode()
        for p in paths:
            with open(p, "ab") as f:
                f.write(mark)


def tenth(root: Path) -> list[Path]:
    """Every tenth file of `root` in sorted order: 10 % of the files."""
    return files_under(root)[::10]


def build_cmd(kiln: Path, src: Path, out: Path, *extra: str) -> list[str]:
    return [str(kiln), "build", str(src), "-o", str(out), *extra]


def measure_builds(kiln: Path, src: Path, out: Path, label: str, steps: dict, level: str,
                   one: list[str], editor: Editor, clean_repeat: int) -> None:
    """Clean build, unchanged rebuild, one file, the largest file, 10 % of the files."""
    flags = ["--compression", level]
    print(f"-- {label}: clean build ({level})", flush=True)
    clean = Step()
    for _ in range(clean_repeat):
        clean.runs.append(timed(build_cmd(kiln, src, out, "--clean", *flags)))
    steps["clean"] = clean
    unchanged = Step()
    for _ in range(REPEAT):
        unchanged.runs.append(timed(build_cmd(kiln, src, out, *flags)))
    steps["unchanged"] = unchanged
    for key, paths in [(f"one:{p}", [src / p]) for p in one] + [("tenth", tenth(src))]:
        print(f"-- {label}: incremental, {key}", flush=True)
        step = Step()
        for _ in range(REPEAT):
            editor.edit(paths)
            step.runs.append(timed(build_cmd(kiln, src, out, *flags)))
        steps[key] = step


def baseline(src: Path, out: Path) -> Step:
    """`tar` of the tree piped into `gzip -9`."""
    step = Step()
    for _ in range(REPEAT):
        step.runs.append(timed(["sh", "-c", f"tar cf - -C '{src}' . | gzip -9 > '{out}'"]))
    return step


def http_get(port: int, path: str) -> bytes | None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", path, headers={"Accept-Encoding": "identity"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return body if resp.status == 200 else None
    except OSError:
        return None


def measure_preview(kiln: Path, src: Path, editor: Editor) -> dict:
    """Start time of `kiln serve DIR --watch` (to its first answer) and the time from
    a write to the new content being served, RELOADS times."""
    page = src / PYDOCS_PAGE
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(kiln), "serve", str(src), "--watch", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The start-up line comes on stderr, after the log lines.
        for line in proc.stderr:
            if line.startswith("kiln: serving"):
                break
        else:
            line = ""
        announced = time.monotonic() - started
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not m:
            sys.exit(f"kiln serve --watch did not announce itself: {line!r}")
        port = int(m.group(1))
        while http_get(port, "/" + PYDOCS_PAGE) is None:
            time.sleep(0.005)
        first_answer = time.monotonic() - started
        reloads = []
        for _ in range(RELOADS):
            time.sleep(0.3)
            editor.edit([page])
            wanted = page.read_bytes()
            written = time.monotonic()
            while http_get(port, "/" + PYDOCS_PAGE) != wanted:
                time.sleep(0.002)
            reloads.append(time.monotonic() - written)
        return {"announced": announced, "first_answer": first_answer, "reloads": reloads}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def pack_open(tool: Path, pack: Path, key: str) -> tuple[str, str]:
    """`Pack::open` median and lookup median, as examples/pack_open prints them."""
    out = subprocess.run([str(tool), str(pack), key], capture_output=True, text=True,
                         check=True).stdout
    open_m = re.search(r"Pack::open median (\S+)", out)
    look_m = re.search(r"\) median (\S+)$", out.strip())
    if not open_m or not look_m:
        sys.exit(f"unexpected pack_open output: {out!r}")
    return open_m.group(1), look_m.group(1)


# Groups of symbols in a profile: a name fragment and what it is.
PROFILE_GROUPS = [
    ("brotli::", "brotli (compression)"),
    ("miniz_oxide", "deflate (gzip compression)"),
    ("zstd", "zstd (compression)"),
    ("blake3", "BLAKE3 (content hashes)"),
    ("[k]", "the kernel (system calls: paths, reads, writes)"),
]


def profile(cmd: list[str], before, work: Path) -> dict:
    """A cpu-clock profile of `cmd` (run after `before()`): the top symbols and the
    share of each group of PROFILE_GROUPS."""
    if shutil.which("perf") is None:
        return {"top": "(perf is not installed: no profile)", "groups": []}
    before()
    data = work / "perf.data"
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-o", str(data), "--",
                    *cmd], capture_output=True, check=False)
    report = subprocess.run(
        ["perf", "report", "--stdio", "--no-children", "-i", str(data), "--sort", "symbol",
         "-g", "none"], capture_output=True, text=True, check=False)
    rows = []
    for line in report.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*?)\s*(?:-\s+-\s*)?$", line)
        if m and not line.startswith("#"):
            rows.append((float(m.group(1)), m.group(2).strip()))
    groups = []
    for fragment, name in PROFILE_GROUPS:
        share = sum(p for p, sym in rows if fragment in sym)
        if share >= 1:
            groups.append((name, share))
    top = "\n".join(f"{p:6.2f}%  {sym}" for p, sym in rows[:12])
    return {"top": top, "groups": groups}


def machine() -> dict:
    info = {}
    info["cpus"] = os.cpu_count()
    with open("/proc/meminfo") as f:
        info["mem_gib"] = int(f.readline().split()[1]) / 2**20
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        info["cpu"] = m.group(1) if m else "?"
    info["kernel"] = os.uname().release
    info["rustc"] = subprocess.run(["rustc", "--version"], capture_output=True,
                                   text=True).stdout.strip()
    return info


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def secs(x: float) -> str:
    return f"{x:.2f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", type=Path, required=True)
    ap.add_argument("--pack-open", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    kiln, work = args.kiln.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not PYDOCS_SOURCE.is_dir():
        sys.exit(f"{PYDOCS_SOURCE}: missing (apt-get install python3.11-doc)")
    info = machine()
    load_start = load()

    # The corpora: a private copy of the docs (they are edited), the tiles.
    py = work / "pydocs"
    if py.exists():
        shutil.rmtree(py)
    shutil.copytree(PYDOCS_SOURCE, py, symlinks=False)
    tiles = work / "tiles"
    if not tiles.is_dir():
        gen = Path(__file__).with_name("gen_tiles.py")
        subprocess.run([sys.executable, str(gen), str(tiles), "--count", str(TILE_COUNT),
                        "--seed", str(TILE_SEED)], check=True)
    for root in (py, tiles):
        warm(root)
    py_bytes = sum(p.stat().st_size for p in files_under(py))
    py_files = len(files_under(py))
    tile_bytes = sum(p.stat().st_size for p in files_under(tiles))
    editor = Editor()

    print("-- baselines: tar | gzip -9", flush=True)
    base_py = baseline(py, work / "pydocs.tar.gz")
    base_tiles = baseline(tiles, work / "tiles.tar.gz")

    py_max: dict = {}
    measure_builds(kiln, py, work / "py-max.pack", "python docs", py_max, "max",
                   [PYDOCS_PAGE, PYDOCS_LARGEST], editor, clean_repeat=1)
    py_fast: dict = {}
    measure_builds(kiln, py, work / "py-fast.pack", "python docs", py_fast, "fast",
                   [PYDOCS_PAGE], editor, clean_repeat=REPEAT)
    tiles_steps: dict = {}
    measure_builds(kiln, tiles, work / "tiles.pack", "tiles", tiles_steps, "max", [TILE],
                   editor, clean_repeat=REPEAT)

    print("-- tiles from archives", flush=True)
    subprocess.run(["tar", "cf", str(work / "tiles.tar"), "-C", str(tiles), "."], check=True)
    tar_steps = {}
    for name in ("tiles.tar", "tiles.tar.gz"):
        step = Step()
        for _ in range(REPEAT):
            step.runs.append(timed(build_cmd(kiln, work / name, work / "tiles-tar.pack",
                                             "--clean")))
        tar_steps[name] = step

    print("-- preview", flush=True)
    preview = measure_preview(kiln, py, editor)

    print("-- pack open", flush=True)
    opens = [(name, pack, pack_open(args.pack_open, pack, key)) for name, pack, key in [
        ("Python docs (`--compression max`)", work / "py-max.pack", "/index.html"),
        ("100,000 tiles", work / "tiles.pack", "/8/0/0.png"),
    ]]
    load_end = load()

    figures = {
        "py_one": py_max[f"one:{PYDOCS_PAGE}"].median("wall"),
        "py_tenth": py_max["tenth"].median("wall"),
        "tiles_clean": tiles_steps["clean"].median("wall"),
        "tiles_tar_rss": max(s.median("rss_mib") for s in tar_steps.values()),
        "preview_start": preview["first_answer"],
        "preview_reload": max(preview["reloads"]),
    }
    profiles = {}
    for key, _, limit, _ in GOALS:
        if figures[key] <= limit:
            continue
        cmd, before = {
            "py_one": (build_cmd(kiln, py, work / "py-max.pack", "--compression", "max"),
                       lambda: editor.edit([py / PYDOCS_PAGE])),
            "py_tenth": (build_cmd(kiln, py, work / "py-max.pack", "--compression", "max"),
                         lambda: editor.edit(tenth(py))),
            "tiles_clean": (build_cmd(kiln, tiles, work / "tiles.pack", "--clean"),
                            lambda: None),
            "tiles_tar_rss": (build_cmd(kiln, work / "tiles.tar", work / "tiles-tar.pack",
                                        "--clean"), lambda: None),
        }.get(key, (None, None))
        if cmd:
            profiles[key] = profile(cmd, before, work)

    write_report(args.out, {
        "info": info, "load_start": load_start, "load_end": load_end,
        "py_files": py_files, "py_bytes": py_bytes, "py_tenth": len(tenth(py)),
        "tile_bytes": tile_bytes, "tiles_tenth": len(tenth(tiles)),
        "base_py": base_py, "base_tiles": base_tiles,
        "base_py_size": (work / "pydocs.tar.gz").stat().st_size,
        "base_tiles_size": (work / "tiles.tar.gz").stat().st_size,
        "py_max": py_max, "py_fast": py_fast, "tiles": tiles_steps, "tar": tar_steps,
        "preview": preview, "opens": opens, "figures": figures, "profiles": profiles,
        "goal_steps": {
            "py_one": py_max[f"one:{PYDOCS_PAGE}"], "py_tenth": py_max["tenth"],
            "tiles_clean": tiles_steps["clean"], "tiles_tar_rss": tar_steps["tiles.tar"],
        },
    })
    print(f"wrote {args.out}")
    return 0


def step_row(label: str, step: Step, extra: str = "") -> str:
    s = step.summary
    counts = f"{s.get('compressed', '–')} / {s.get('reused', '–')}" if s else "–"
    return (f"| {label} | {secs(step.median('wall'))} | {secs(step.median('user'))} | "
            f"{step.median('rss_mib'):,.0f} MiB | {counts} |{extra}")


def write_report(out: Path, r: dict) -> None:
    info = r["info"]
    shared = float(r["load_start"].split()[0]) > 0.5 or float(r["load_end"].split()[0]) > 0.5
    L = []
    w = L.append
    w("# `kiln build` measurements")
    w("")
    w("How long `kiln build` and the live preview take, how big the packs get, and how much")
    w("memory a build needs. Everything here comes from one run of")
    w("`bench/build_bench.sh [WORKDIR]` (it builds kiln in release mode and rewrites this")
    w("file); the figures are that run's.")
    w("")
    w("## Machine and method")
    w("")
    w(f"- {info['cpus']} CPUs ({info['cpu']}), {info['mem_gib']:.0f} GiB RAM, Linux "
      f"{info['kernel']}, {info['rustc']}, `--release` (fat LTO).")
    w(f"- Load average (1, 5, 15 min): {r['load_start']} at the start, {r['load_end']} at"
      " the end. "
      + ("The machine was **shared** with other work (builds and tests on the same cores),"
         " so wall times are noisy; the CPU time (user) is the steadier figure."
         if shared else "The machine was otherwise idle."))
    w("- Sources in the page cache (every file is read once before the first build).")
    w(f"- Each step runs {REPEAT} times and the median is shown, except the clean build at"
      " maximum compression of the Python docs (once). Wall, user CPU and peak RSS from GNU"
      " time; sizes and the compressed/reused counts from kiln's summary.")
    w("- Levels: `--compression max` (the default of `kiln build`): brotli 11 (window up to"
      " 2^24, the smallest that holds the file), gzip (deflate) 9, zstd 19; `--compression"
      " fast` (the default of the preview): brotli 3, gzip 1, zstd 3. Encodings `br,gzip`"
      " (the default). An encoded variant is kept only if it saves ≥ 10 % and ≥ 100"
      " bytes.")
    w("- Incremental builds write over the pack of the previous step, which is their base;"
      " each change appends a new line to the changed files.")
    w("")
    w("## Goals")
    w("")
    w("| goal | limit | measured | met |")
    w("|------|------:|---------:|:---:|")
    for key, text, limit, unit in GOALS:
        value = r["figures"][key]
        shown = f"{value:,.0f} MiB" if unit == "MiB" else secs(value)
        lim = f"{limit:,.0f} MiB" if unit == "MiB" else f"{limit} s"
        w(f"| {text} | {lim} | {shown} | {'yes' if value <= limit else '**no**'} |")
    w("")
    for key, prof in r["profiles"].items():
        step = r["goal_steps"][key]
        cpu = step.median("user") + step.median("sys")
        text = next(t for k, t, _, _ in GOALS if k == key)
        shares = ", ".join(f"{name} {share:.0f} %" for name, share in prof["groups"])
        w(f"**Missed: {text}.** The build took {cpu:.2f} s of CPU (user and system) in"
          f" {secs(step.median('wall'))} of wall time on {info['cpus']} cores"
          + (", so it waited for the cores the other work held"
             if step.median("wall") > 1.2 * cpu / info["cpus"] else "")
          + f". Where the CPU time went (`perf record -e cpu-clock`): {shares or 'no group'}"
          "; the top symbols:")
        w("")
        w("```")
        w(prof["top"])
        w("```")
        w("")

    w("## Python 3.11 documentation (`python3.11-doc`)")
    w("")
    s = r["py_max"]["clean"].summary
    w(f"Source: a copy of `/usr/share/doc/python3.11/html` (symbolic links followed),"
      f" {r['py_files']:,} files, {r['py_bytes']:,} bytes; {s['files']:,} files kept (the"
      f" ignore rules drop `.buildinfo`), {s['routes']:,} routes.")
    w("")
    w("| build | wall | user CPU | peak RSS | encodings compressed / reused |")
    w("|-------|-----:|---------:|---------:|------------------------------:|")
    w(baseline_row(r["base_py"]))
    for level in ("max", "fast"):
        steps = r[f"py_{level}"]
        w(step_row(f"clean, `--compression {level}`", steps["clean"]))
        w(step_row(f"nothing changed, {level}", steps["unchanged"]))
        for key, step in steps.items():
            if key.startswith("one:"):
                w(step_row(f"one file changed (`{key[4:]}`), {level}", step))
        w(step_row(f"10 % of the files changed ({r['py_tenth']}), {level}", steps["tenth"]))
    w("")
    w("Sizes (distinct bodies per encoding, bytes; share of the identity bytes):")
    w("")
    w("| | identity | br | gzip | pack |")
    w("|-|---------:|---:|-----:|-----:|")
    for level in ("max", "fast"):
        s = r[f"py_{level}"]["clean"].summary
        ident = s["identity"][1]
        w(f"| `--compression {level}` | {ident:,} | {s['br'][1]:,} ({s['br'][1] / ident:.1%})"
          f" | {s['gzip'][1]:,} ({s['gzip'][1] / ident:.1%}) | {s['pack']:,} |")
    w(f"| baseline `tar \\| gzip -9` (one stream) | | | {r['base_py_size']:,} | |")
    w("")

    w("## 100,000 map tiles")
    w("")
    s = r["tiles"]["clean"].summary
    w(f"Generated with `bench/lib/gen_tiles.py OUT --count {TILE_COUNT} --seed {TILE_SEED}`"
      f" (z/x/y.png; random padding, so incompressible and without duplicates):"
      f" {s['files']:,} files, {r['tile_bytes']:,} bytes. PNG is not a compressible type:"
      f" no variant is tried. Pack: {s['pack']:,} bytes; `tar | gzip -9`:"
      f" {r['base_tiles_size']:,} bytes.")
    w("")
    w("| build | wall | user CPU | peak RSS | encodings compressed / reused |")
    w("|-------|-----:|---------:|---------:|------------------------------:|")
    w(baseline_row(r["base_tiles"]))
    w(step_row("clean, from the directory", r["tiles"]["clean"]))
    w(step_row("nothing changed", r["tiles"]["unchanged"]))
    w(step_row(f"one tile changed (`{TILE}`)", r["tiles"][f"one:{TILE}"]))
    w(step_row(f"10 % of the tiles changed ({r['tiles_tenth']:,})", r["tiles"]["tenth"]))
    for name, step in r["tar"].items():
        w(step_row(f"clean, from `{name}`", step))
    w("")
    w("A build holds at most 64 MiB of file data at once (`--buffer-bytes`, a hidden flag):"
      " half for the batches of files the writer reads, half for the background"
      " compression (its inputs and the encoded bodies not yet written); a file that alone"
      " needs more is streamed through the pack in pieces. An archive is read once as a"
      " stream, its entries staged in an unnamed file beside the pack. The rest of the peak"
      " RSS is the encoders' state (brotli 11 keeps about ten times its window), the pack's"
      " tables (routes, header blocks), which grow with the number of files (about 1.5 KB"
      " per file here), and the program.")
    w("")

    p = r["preview"]
    w("## Live preview: `kiln serve DIR --watch`")
    w("")
    w(f"The Python docs: the time from starting `kiln serve DIR --watch` to its first"
      f" answer (the pack fired in memory at `--compression fast`), and from a write to"
      f" `{PYDOCS_PAGE}` to the new bytes being served ({RELOADS} writes, 0.3 s apart).")
    w("")
    w("| | time |")
    w("|-|-----:|")
    w(f"| start, to the `serving` line | {secs(p['announced'])} |")
    w(f"| start, to the first answer | {secs(p['first_answer'])} |")
    w(f"| a change served: median, worst of {len(p['reloads'])} |"
      f" {secs(statistics.median(p['reloads']))}, {secs(max(p['reloads']))} |")
    w("")

    w("## Opening a pack")
    w("")
    w("`examples/pack_open.rs` opens the pack 201 times and prints the median (`Pack::open`"
      " checks only the header and maps the file), and the median of a lookup.")
    w("")
    w("| pack | size | `Pack::open` median | lookup median |")
    w("|------|-----:|--------------------:|--------------:|")
    for name, pack, (open_t, look_t) in r["opens"]:
        w(f"| {name} | {pack.stat().st_size:,} | {open_t} | {look_t} |")
    w("")
    out.write_text("\n".join(L) + "\n")


def baseline_row(step: Step) -> str:
    return (f"| baseline: `tar \\| gzip -9` | {secs(step.median('wall'))} |"
            f" {secs(step.median('user'))} | {step.median('rss_mib'):,.0f} MiB | – |")


if __name__ == "__main__":
    sys.exit(main())
