#!/bin/bash
# HTTP/3 attacks of issue 34 against one server, memory from /proc:
# bench/h3_attack.sh KILN_BINARY [epoll|uring]. Python with aioquic:
# PYTHON (default python3). Stops by itself (every client is bounded).
#  1. idle: N (1,000) HTTP/3 connections held idle (bench/lib/idle_conns.py):
#     RSS per connection;
#  2. half-open: N clients that answer the Retry, then never the server's
#     flight (tests/http3/h3attack.py half-open): RSS added, and the
#     seconds until no QUIC connection is left open;
#  3. burst: N connections at once, one GET each, then closed: RSS at the
#     start, at the peak, and 10 s after the last closed.
set -u
K=$(realpath "$1"); IO=${2:-epoll}; N=${N:-1000}; PY=${PYTHON:-python3}
HERE=$(realpath "$(dirname "$0")"); ATTACK="$HERE/../tests/http3/h3attack.py"
W=$(mktemp -d); trap 'kill $srv 2>/dev/null; rm -rf "$W"' EXIT
mkdir "$W/site"; printf 'Hello, world!' > "$W/site/index.html"
"$K" build "$W/site" -o "$W/site.pack" -q
port=$((20000 + RANDOM % 20000)); mport=$((port + 1))
start() {
  "$K" serve "$W/site.pack" --listen-tls 127.0.0.1:$port --tls-self-signed --io "$IO" \
    --metrics 127.0.0.1:$mport --no-sandbox > /dev/null 2> "$W/serve.err" &
  srv=$!
  for _ in $(seq 100); do curl -sk -o /dev/null https://127.0.0.1:$port/ && break; sleep 0.1; done
}
stop() { kill $srv; wait $srv 2>/dev/null; }
rss() { awk '/VmRSS/{print $2}' /proc/$srv/status; }
open_now() { curl -s 127.0.0.1:$mport/metrics | awk '/^kiln_quic_connections_open /{print $2}'; }

start; r0=$(rss)
coproc IDLE { timeout 300 "$PY" "$HERE/lib/idle_conns.py" 127.0.0.1 $port "$N" --http3 --timeout 240; }
read -r _ opened <&"${IDLE[0]}"; sleep 2; r1=$(rss)
echo "idle: $opened connections: $r0 -> $r1 kB, $(( (r1 - r0) * 1024 / ${opened:-1} )) B each"
echo >&"${IDLE[1]}"; wait $IDLE_PID 2>/dev/null; stop

start; r0=$(rss)
coproc HALF { timeout 120 "$PY" "$ATTACK" $port half-open "$N"; }
read -r result <&"${HALF[0]}"; r1=$(rss); t0=$(date +%s.%N)
while [ "$(open_now)" != 0 ] && [ "$(echo "$(date +%s.%N) - $t0 < 90" | bc)" = 1 ]; do sleep 0.2; done
echo "half-open: $result: $r0 -> $r1 kB; none open $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-4) s after the last"
echo >&"${HALF[1]}"; wait $HALF_PID 2>/dev/null; stop

start; "$PY" "$ATTACK" $port burst 20 > /dev/null; r0=$(rss); peak=$r0
timeout 120 "$PY" "$ATTACK" $port burst "$N" > "$W/burst" & b=$!
while kill -0 $b 2>/dev/null; do r=$(rss); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.2; done
t0=$(date +%s); while [ "$(open_now)" != 0 ] && [ $(( $(date +%s) - t0 )) -lt 60 ]; do sleep 0.2; done
sleep 10
echo "burst: $(cat "$W/burst"): $r0 kB, peak $peak kB, $(rss) kB 10 s after the last closed"
stop
