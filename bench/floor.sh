#!/bin/bash
# The cleartext hello floor (bench/FLOOR.md): bench/floor.sh KILN_BINARY [ROUNDS].
# kiln serves `Hello World!` on core 0, wrk loads it from core 1 (1 s warm-up,
# 5 s measured); per case: req/s, requests per server CPU-second (utime+stime
# from /proc), the user/system split. Cases are interleaved over the rounds.
set -u
K=$(realpath "$1"); ROUNDS=${2:-3}
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
mkdir "$DIR/site"; printf 'Hello World!' > "$DIR/site/index.txt"
"$K" build "$DIR/site" -o "$DIR/hello.pack" -q
PIPELINE=$(dirname "$(realpath "$0")")/lua/pipeline.lua
one() { # name "kiln flags" pipeline-depth wrk-flags...
  local name=$1 flags=$2 depth=$3; shift 3
  local port pid
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086
  taskset -c 0 "$K" serve "$DIR/hello.pack" --threads 1 --no-security-headers --listen "127.0.0.1:$port" $flags > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$port/index.txt" && break; sleep 0.1; done
  local load=(taskset -c 1 wrk -t1 "$@") tail=()
  [ "$depth" -gt 1 ] && load+=(-s "$PIPELINE") && tail=(-- /index.txt "$depth")
  "${load[@]}" -d1s "http://127.0.0.1:$port/index.txt" "${tail[@]}" > /dev/null
  local u0 s0 u1 s1 out
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  out=$("${load[@]}" -d5s "http://127.0.0.1:$port/index.txt" "${tail[@]}")
  read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2> /dev/null
  local requests ticks
  requests=$(echo "$out" | awk '/requests in/{print $1}')
  ticks=$(( u1 - u0 + s1 - s0 )); [ "$ticks" -gt 0 ] || ticks=1
  printf '%-24s %9d req/s %9d req per CPU-s  user %3d%%  system %3d%%  server busy %3d%%\n' \
    "$name" $(( requests / 5 )) $(( requests * $(getconf CLK_TCK) / ticks )) \
    $(( 100 * (u1 - u0) / ticks )) $(( 100 * (s1 - s0) / ticks )) $(( ticks / 5 ))
}
for round in $(seq "$ROUNDS"); do
  echo "round $round (load average $(cut -d' ' -f1 /proc/loadavg))"
  one uring-c128 "" 1 -c128
  one epoll-c128 "--io epoll" 1 -c128
  one dummy-c128 "--dummy" 1 -c128
  one uring-c16 "" 1 -c16
  one uring-c512 "" 1 -c512
  one uring-pipelined16-c128 "" 16 -c128
done
