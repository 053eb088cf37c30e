"""Get a fresh machine ready: install the tools, build kiln, describe the machine."""

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from corpora import PYDOCS_SOURCE
from measure import oha_binary

# Debian packages needed, each with the file whose presence shows it is installed.
# nghttp2-client brings h2load (the HTTP/2 load) and nghttp (the check of the server's
# SETTINGS); curl (7.83 or later, for %{header_json}) makes the HTTP/2 cases' checks.
APT_PACKAGES = {
    "wrk": "/usr/bin/wrk",
    "nghttp2-client": "/usr/bin/h2load",
    "curl": "/usr/bin/curl",
    "nginx": "/usr/sbin/nginx",
    "h2o": "/usr/bin/h2o",
    "python3.11-doc": str(PYDOCS_SOURCE),
    # nft counts the bytes on the wire of the HTTP/3 cases and their HTTP/2 twins.
    "nftables": "/usr/sbin/nft",
}
# Python modules installed with pip when missing: (module, pip package, required).
# brotli decodes the `br` responses checked before the pydocs runs; matplotlib draws the
# chart, which the report skips (saying so) if it cannot be installed.
# aioquic speaks HTTP/3 for the HTTP/3 cases' checks and idle connections.
PIP_MODULES = [("brotli", "Brotli", True), ("aioquic", "aioquic", True),
               ("matplotlib", "matplotlib", False)]
# Caddy, the Go peer: the release issue 23 measured, built with `go install` when missing
# (it is in no Debian release this recent).
CADDY_VERSION = "v2.11.9"
CADDY_MODULE = f"github.com/caddyserver/caddy/v2/cmd/caddy@{CADDY_VERSION}"
# oha, the HTTP/3 cases' load client (`cargo install`, with its http3 feature).
OHA_VERSION = "1.16.0"
# Other commands the harness runs; they come with the base system.
REQUIRED_COMMANDS = ["taskset", "strace"]


class SetupError(Exception):
    """A tool cannot be installed or found; the message says which and why."""


def _run_quiet(command: list[str], what: str) -> None:
    """Run `command`, showing its output only if it fails."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} failed ({' '.join(command)}):\n{tail}")


def _pip_install(package: str) -> None:
    """pip install `package`, with --break-system-packages where the system Python is
    marked externally managed (PEP 668: Debian 12 and later) and no virtual environment
    is active, as ./test does for aioquic."""
    command = [sys.executable, "-m", "pip", "install", "-q", package]
    managed = Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED"
    if managed.exists() and sys.prefix == sys.base_prefix:
        command.append("--break-system-packages")
    _run_quiet(command, "pip install")


def install_tools() -> None:
    """apt-get install the missing packages, pip install the missing modules."""
    missing = [name for name, marker in APT_PACKAGES.items() if not os.path.exists(marker)]
    if missing:
        if os.geteuid() != 0:
            raise SetupError(f"missing packages {', '.join(missing)}; run bench/run as root")
        print(f"bench: apt-get install {' '.join(missing)}", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)
    for command in REQUIRED_COMMANDS:
        if shutil.which(command) is None:
            raise SetupError(f"`{command}` not found (Debian: apt-get install {command})")
    for module, package, required in PIP_MODULES:
        try:
            __import__(module)
        except ImportError:
            print(f"bench: pip install {package}", flush=True)
            try:
                _pip_install(package)
            except SetupError as err:
                if required:
                    raise
                print(f"bench: warning: {err}", flush=True)


def caddy_binary() -> Path | None:
    """Caddy on PATH, or where `go install` puts it; None when neither has it."""
    on_path = shutil.which("caddy")
    installed = Path(os.environ.get("GOBIN") or Path.home() / "go" / "bin") / "caddy"
    return Path(on_path) if on_path else installed if installed.exists() else None


def install_caddy() -> None:
    """`go install` Caddy when it is missing and Go is there; a failure is reported and
    the run goes on without Caddy (servers.entries marks it unavailable)."""
    if caddy_binary() is not None or shutil.which("go") is None:
        return
    print(f"bench: go install {CADDY_MODULE}", flush=True)
    try:
        _run_quiet(["go", "install", CADDY_MODULE], "go install")
    except SetupError as err:
        print(f"bench: warning: {err}", flush=True)


def install_oha() -> None:
    """`cargo install` oha with HTTP/3 when it is missing (the HTTP/3 cases' load client;
    about 10 minutes to build)."""
    if Path(oha_binary()).exists():
        return
    if shutil.which("cargo") is None:
        raise SetupError("oha not found and cargo missing to install it")
    print(f"bench: cargo install oha --version {OHA_VERSION} --features http3", flush=True)
    _run_quiet(["cargo", "install", "oha", "--version", OHA_VERSION, "--locked",
                "--features", "http3"], "cargo install")


def build_kiln(repo: Path, log: Path) -> tuple[Path | None, str]:
    """`cargo build --release`; return (binary, "") or (None, why kiln cannot run)."""
    if shutil.which("cargo") is None:
        return None, "cargo not found"
    print(f"bench: cargo build --release (log: {log})", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        built = subprocess.run(
            ["cargo", "build", "--release"], cwd=repo, stdout=out, stderr=subprocess.STDOUT
        )
    if built.returncode != 0:
        errors = [line for line in log.read_text().splitlines() if line.startswith("error")]
        first = errors[0] if errors else f"exit status {built.returncode}"
        return None, f"cargo build --release failed: {first} (see {log})"
    # Under CARGO_TARGET_DIR when it is set (relative to `repo`, where cargo ran).
    binary = repo / os.environ.get("CARGO_TARGET_DIR", "target") / "release" / "kiln"
    for subcommand in ("build", "serve"):
        probe = subprocess.run([str(binary), subcommand, "--help"], capture_output=True)
        if probe.returncode != 0:
            return None, f"{binary} has no `{subcommand}` subcommand yet"
    return binary, ""


def _first_line(command: list[str]) -> str:
    """First non-empty output line of a version command (nginx prints to stderr)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as err:
        return f"unavailable ({err.strerror})"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0].strip() if lines else "unknown"


def versions(kiln: Path | None, repo: Path) -> dict[str, str]:
    """Version strings of the clients and of every server that can run."""
    found = {
        "wrk": _first_line(["wrk", "--version"]),
        "h2load": _first_line(["h2load", "--version"]),
        "oha": _first_line([oha_binary(), "--version"]),
        "nginx": _first_line(["nginx", "-v"]),
        "h2o": _first_line(["h2o", "--version"]),
    }
    caddy = caddy_binary()
    if caddy is not None:
        # `caddy version` says "unknown" when built by `go install`; its build
        # information names the module's version.
        info = subprocess.run([str(caddy), "build-info"], capture_output=True, text=True).stdout
        found["caddy"] = next((" ".join(line.split()[1:3]) for line in info.splitlines()
                               if line.startswith("mod\t")), "unknown")
    if kiln is not None:
        commit = _first_line(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"])
        found["kiln"] = f"{_first_line([str(kiln), '--version'])} (commit {commit})"
    return found


def machine() -> dict[str, str | int]:
    """What the numbers were measured on."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "nproc": os.cpu_count() or 0,
        "cpu_model": model,
        "kernel": platform.release(),
        "memory_mib": mem_kib // 1024,
    }
