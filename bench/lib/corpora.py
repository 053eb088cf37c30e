"""The benchmark corpora: build them once under bench/work/, list their paths, pack them.

Each corpus is a directory served as is by nginx and h2o, plus the directory kiln builds
its pack from (the same files, without the `.gz` side files that nginx and h2o need for
pre-compressed gzip). A corpus directory is generated under a temporary name and renamed
when complete, so an interrupted run never leaves a half-made corpus behind.
"""

import gzip
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

# Where Debian's python3.11-doc package installs the HTML documentation.
PYDOCS_SOURCE = Path("/usr/share/doc/python3.11/html")
# Text types given a `.gz` side file in the pydocs corpus (images are already compressed).
GZIP_SUFFIXES = {".html", ".css", ".js", ".txt", ".svg", ".xml", ".json"}
# The tiles corpus: size and seed given to gen_tiles.py.
TILE_COUNT = 100_000
TILE_SEED = 1


@dataclass(frozen=True)
class Corpus:
    """One prepared corpus."""

    # Short name used by cases and in file names.
    name: str
    # Document root for nginx and h2o.
    root: Path
    # Directory kiln builds its pack from (no `.gz` side files).
    kiln_source: Path
    # File listing the URL paths of the corpus, one per line, for random-path cases.
    paths_file: Path


def _write_hello(target: Path) -> None:
    (target / "index.txt").write_bytes(b"Hello World!")


def _write_answer(target: Path) -> None:
    # `answer.txt`, not `answer`: the suffix gives text/plain in every server; kiln maps
    # /answer to it by suffix stripping, nginx and h2o by their configuration.
    (target / "answer.txt").write_bytes(b"42")


def _write_pydocs(target: Path) -> None:
    # symlinks=False copies what the two symlinks in the package (jquery, underscore)
    # point to, so the corpus is self-contained.
    shutil.copytree(PYDOCS_SOURCE, target, symlinks=False, dirs_exist_ok=True)


def _write_tiles(target: Path) -> None:
    generator = Path(__file__).with_name("gen_tiles.py")
    subprocess.run(
        [sys.executable, str(generator), str(target), "--count", str(TILE_COUNT),
         "--seed", str(TILE_SEED)],
        check=True,
    )


def _add_gzip_side_files(root: Path) -> int:
    """Write `NAME.gz` (gzip -9, no timestamp) beside each text file it shrinks."""
    written = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in GZIP_SUFFIXES or not path.is_file():
            continue
        data = path.read_bytes()
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        if len(packed) < len(data):
            path.with_name(path.name + ".gz").write_bytes(packed)
            written += 1
    return written


def _url_paths(root: Path) -> list[str]:
    """Every servable file of `root` as a URL path, sorted, `.gz` side files excluded.

    Dotfiles (the docs' `.buildinfo`) are left out: kiln hides them by policy, as a
    deployment should, so they are not part of what a site serves."""
    paths = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        hidden = any(part.startswith(".") for part in relative.parts)
        if path.is_file() and path.suffix != ".gz" and not hidden:
            paths.append("/" + quote(relative.as_posix()))
    return sorted(paths)


def _make_dir(final: Path, fill) -> None:
    """Create `final` with `fill(tmp_dir)` unless it already exists (atomic rename)."""
    if final.is_dir():
        return
    print(f"bench: preparing corpus {final.name}", flush=True)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    fill(partial)
    os.rename(partial, final)


def _link_tree(source: Path):
    """A `fill` function that mirrors `source` with hard links, then adds `.gz` files."""

    def fill(target: Path) -> None:
        shutil.copytree(source, target, copy_function=os.link, dirs_exist_ok=True)
        count = _add_gzip_side_files(target)
        print(f"bench: pydocs: {count} .gz side files written")

    return fill


def prepare(work: Path, names: set[str]) -> dict[str, Corpus]:
    """Make (or reuse) the named corpora under `work/corpora` and their path lists."""
    corpora_dir = work / "corpora"
    paths_dir = work / "paths"
    paths_dir.mkdir(parents=True, exist_ok=True)
    writers = {"hello": _write_hello, "answer": _write_answer, "tiles": _write_tiles}
    prepared = {}
    for name in sorted(names):
        if name == "pydocs":
            kiln_source = corpora_dir / "pydocs-plain"
            _make_dir(kiln_source, _write_pydocs)
            root = corpora_dir / "pydocs"
            _make_dir(root, _link_tree(kiln_source))
        else:
            root = kiln_source = corpora_dir / name
            _make_dir(root, writers[name])
        paths_file = paths_dir / f"{name}.txt"
        if not paths_file.exists():
            partial = paths_file.with_suffix(".partial")
            partial.write_text("\n".join(_url_paths(kiln_source)) + "\n")
            os.rename(partial, paths_file)
        prepared[name] = Corpus(name, root, kiln_source, paths_file)
    return prepared


def sample_paths(corpus: Corpus, count: int, seed: int) -> list[str]:
    """A fixed sample of the corpus's URL paths, for the checks made before each run."""
    paths = corpus.paths_file.read_text().split()
    return random.Random(seed).sample(paths, min(count, len(paths)))


def shuffled_paths(corpus: Corpus, seed: int) -> Path:
    """The corpus's URL paths in a fixed pseudo-random order, one per line, written once
    beside its paths list: h2load's input file (-i) on the HTTP/2 random-path cases.

    h2load has no script to draw paths at random as bench/lua/paths.lua does for wrk: it
    walks its list in order, from the first path on every connection. Shuffled, the list
    at least does not walk the corpus in directory order (tiles z/x/y by rows)."""
    shuffled = corpus.paths_file.with_name(f"{corpus.name}-shuffled-{seed}.txt")
    if not shuffled.exists():
        paths = corpus.paths_file.read_text().split()
        random.Random(seed).shuffle(paths)
        partial = shuffled.with_suffix(".partial")
        partial.write_text("\n".join(paths) + "\n")
        os.rename(partial, shuffled)
    return shuffled


def build_packs(kiln: Path, work: Path, corpora: dict[str, Corpus]) -> dict[str, Path]:
    """Build one kiln pack per corpus, reusing packs newer than both kiln and the corpus.

    Raises subprocess.CalledProcessError when `kiln build` fails (output is shown).
    """
    packs_dir = work / "packs"
    packs_dir.mkdir(parents=True, exist_ok=True)
    packs = {}
    for name, corpus in sorted(corpora.items()):
        pack = packs_dir / f"{name}.pack"
        inputs_mtime = max(kiln.stat().st_mtime, corpus.kiln_source.stat().st_mtime)
        if not pack.exists() or pack.stat().st_mtime < inputs_mtime:
            print(f"bench: kiln build {name}", flush=True)
            subprocess.run(
                [str(kiln), "build", str(corpus.kiln_source), "-o", str(pack), "-q"],
                check=True,
            )
        packs[name] = pack
    return packs
