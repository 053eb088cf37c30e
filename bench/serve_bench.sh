#!/bin/bash
# Measures `kiln serve` on one core against wrk on the other: unpipelined and
# 16-deep pipelined throughput (pack, dummy, with and without security
# headers, with the access log), syscalls per request (strace -c), and RSS
# with 10,000 idle keep-alive connections.
# Needs: wrk, strace, python3; a release build (cargo build --release).
# Usage: bench/serve_bench.sh   (from the repository root)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=$ROOT/target/release/kiln
PACK=$(mktemp -d)/hello.pack
LUA=$ROOT/bench/pipeline16.lua
cargo run -q --release --example hello_pack -- "$PACK" >/dev/null
PORT=18400

start() { # serve args... ; sets PID
  PORT=$((PORT + 1))
  taskset -c 0 "$KILN" serve "$@" --listen "127.0.0.1:$PORT" --threads 1 >/dev/null 2>&1 &
  sleep 0.5
  PID=$(pgrep -f "kiln serve .*127.0.0.1:$PORT")
}
rate() { # wrk args...
  taskset -c 1 wrk -t1 -c128 -d5s "$@" "http://127.0.0.1:$PORT/index.txt" | awk '/Requests\/sec/ {print $2}'
}
throughput() { # label, serve args...
  local label=$1; shift
  start "$@"
  echo "$label: unpipelined $(rate) req/s, pipelined x16 $(rate -s "$LUA") req/s"
  kill "$PID"; wait "$PID" 2>/dev/null || true
}
syscalls() { # label, wrk args...
  local label=$1; shift
  start "$PACK"
  strace -c -f -p "$PID" -o "$PACK.strace" 2>/dev/null &
  local tracer=$!
  sleep 0.5
  local n
  n=$(taskset -c 1 wrk -t1 -c128 -d2s "$@" "http://127.0.0.1:$PORT/index.txt" | awk '/requests in/ {print $1}')
  kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
  kill "$PID"; wait "$PID" 2>/dev/null || true
  local calls
  calls=$(awk '/total/ {print $4}' "$PACK.strace")
  echo "$label: $calls syscalls for $n requests = $(python3 -c "print(round($calls/$n, 3))") per request"
}

throughput "pack" "$PACK"
throughput "pack --no-security-headers" "$PACK" --no-security-headers
throughput "pack --access-log FILE" "$PACK" --access-log "$PACK.log"
throughput "--dummy" --dummy
throughput "--dummy --no-security-headers" --dummy --no-security-headers
syscalls "syscalls, unpipelined"
syscalls "syscalls, pipelined x16" -s "$LUA"
start "$PACK"
python3 "$ROOT/bench/idle_connections.py" "$PORT" 10000 3 "$PID"
kill "$PID"; wait "$PID" 2>/dev/null || true
