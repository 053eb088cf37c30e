#!/bin/bash
# The load client's cost per HTTP/2 response, a count that does not depend on
# what else the machine does: bench/client_callgrind.sh KILN_BINARY OUT_DIR runs
# h2load (CONNS connections x STREAMS streams, default 128 x 16 as bench/run's
# h2c-hello case; h2c, `Hello World!`) under callgrind against kiln and against
# h2o (when installed) and prints h2load's instructions per response (the
# difference between 20,000 and 60,000 requests cancels start-up). Issue 23's
# goal: kiln's <= h2o's.
set -u
CONNS=${CONNS:-128}; STREAMS=${STREAMS:-16}
K=$(realpath "$1"); OUT=$2; CONF=$(dirname "$(realpath "$0")")/conf
mkdir -p "$OUT/site"; cd "$OUT" || exit 1
printf 'Hello World!' > site/index.txt
"$K" build site -o hello.pack -q
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
count() { # name port: h2load's instructions per response
  local n a b
  for n in 20000 60000; do
    valgrind --tool=callgrind --callgrind-out-file="cg.client.$1.$n" \
      h2load -n $n -c "$CONNS" -m "$STREAMS" "http://127.0.0.1:$2/index.txt" > "h2load.$1.$n.txt" 2>&1
    grep -q "$n succeeded" "h2load.$1.$n.txt" || { echo "$1: h2load failed (h2load.$1.$n.txt)"; return; }
  done
  a=$(awk '/^summary:/{print $2}' "cg.client.$1.20000"); b=$(awk '/^summary:/{print $2}' "cg.client.$1.60000")
  echo "$1: h2load $(( (b - a) / 40000 )) instructions per response"
}
p=$(port)
"$K" serve hello.pack --threads 1 --no-security-headers --listen "127.0.0.1:$p" > serve.kiln.log 2>&1 &
pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$p/index.txt" && break; sleep 0.1; done
count kiln "$p"
kill "$pid"; wait "$pid" 2> /dev/null
if command -v h2o > /dev/null; then
  p=$(port)
  sed -e "s|@PORT@|$p|" -e "s|@ROOT@|$PWD/site|" -e "s|@TLS@||" \
    "$CONF/h2o.conf" > h2o.conf
  h2o -c h2o.conf > serve.h2o.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$p/index.txt" && break; sleep 0.1; done
  count h2o "$p"
  kill "$pid"; wait "$pid" 2> /dev/null
fi
