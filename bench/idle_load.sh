#!/bin/bash
# The CPU of a server holding many idle HTTP/3 connections beside a light
# load: bench/idle_load.sh KILN_BINARY [epoll|uring]. One server thread on
# CPU 0; on CPU 1, IDLE (1,000) connections held by aioquic
# (bench/lib/idle_conns.py: one request each, then a PING every 10 s),
# then oha at RATE (2,000) HTTP/3 requests/s over 4 connections for 20 s.
# Prints the server's CPU time, user (where per-connection work in a loop
# turn shows; other processes on a shared machine change it less) and
# all (schedstat: the kernel's share, wake-ups and system calls, is most
# of it at this rate), over 20 s of idle connections only and over 18 s
# of the load, where each request is a loop turn of its own.
set -u
K=$(realpath "$1"); IO=${2:-epoll}; LIB=$(realpath "$(dirname "$0")/lib")
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir "$W/site"; printf 'Hello, world!' > "$W/site/hello.txt"
"$K" build "$W/site" -o "$W/hello.pack" -q
port=$((20000 + RANDOM % 20000))
taskset -c 0 "$K" serve "$W/hello.pack" --listen-tls 127.0.0.1:$port --tls-self-signed \
  --threads 1 --io "$IO" --no-sandbox > /dev/null 2> "$W/serve.err" &
srv=$!
for _ in $(seq 100); do curl -sk -o /dev/null https://127.0.0.1:$port/hello.txt && break; sleep 0.1; done
coproc IDLE_CONNS { taskset -c 1 python3 "$LIB/idle_conns.py" 127.0.0.1 $port "${IDLE:-1000}" \
  --http3 --path /hello.txt --timeout 600; }
read -r opened <&"${IDLE_CONNS[0]}"
cpu_ns() { awk '{print $1}' /proc/$srv/task/*/schedstat | paste -sd+ | bc; }
# User CPU in milliseconds (clock ticks).
user_ms() { awk -v hz="$(getconf CLK_TCK)" '{print $14 * 1000 / hz}' /proc/$srv/stat; }
sleep 2
c0=$(cpu_ns); u0=$(user_ms); sleep 20; c1=$(cpu_ns); u1=$(user_ms)
timeout 22 taskset -c 1 oha --no-tui --insecure --http-version 3 -z 20s -c 4 -q "${RATE:-2000}" \
  --output-format json https://127.0.0.1:$port/hello.txt > "$W/oha.json" 2>/dev/null &
oha=$!
sleep 1; c2=$(cpu_ns); u2=$(user_ms); sleep 18; c3=$(cpu_ns); u3=$(user_ms)
wait $oha
echo >&"${IDLE_CONNS[1]}"; read -r still <&"${IDLE_CONNS[0]}"
ok=$(python3 -c "import json; print(json.load(open('$W/oha.json'))['statusCodeDistribution'].get('200', 0))")
kill $srv; wait $srv 2>/dev/null
echo "$IO, $opened idle: 20 s idle: $(( u1 - u0 )) ms user, $(( (c1 - c0) / 1000000 )) ms CPU;" \
  "18 s of load: $(( u3 - u2 )) ms user, $(( (c3 - c2) / 1000000 )) ms CPU" \
  "($ok requests answered 200 in 20 s); $still"
