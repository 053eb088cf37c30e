#!/bin/bash
# Instructions per request under callgrind (counts that do not depend on
# what else the machine does): bench/callgrind.sh KILN_BINARY OUT_DIR, for
# kiln BINARY serving examples/site over HTTP/1.1 keep-alive
# 16-deep pipelined (python client) and h2c (h2load 4 x 16); the difference
# between N1 and N2 requests cancels start-up and shutdown.
set -u
K=$(realpath "$1"); OUT=$2; SITE=$(realpath "$(dirname "$0")/../examples/site")
mkdir -p "$OUT"; cd "$OUT"
"$K" build "$SITE" -o site.pack -q
run() { # mode n
  local port=$((20000 + RANDOM % 20000))
  valgrind --tool=callgrind --callgrind-out-file=cg.$1.$2 $K serve site.pack --listen 127.0.0.1:$port --threads 1 --io epoll --no-sandbox > /dev/null 2> serve.$1.$2.err &
  local pid=$!
  for i in $(seq 200); do curl -s -o /dev/null 127.0.0.1:$port/ && break; sleep 0.1; done
  if [ $1 = h1 ]; then
    python3 - $port $2 <<'PY'
import socket,sys
port,n=int(sys.argv[1]),int(sys.argv[2])
s=socket.create_connection(("127.0.0.1",port))
req=b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\n\r\n"
buf=b""; done=0
while done<n:
    k=min(16,n-done); s.sendall(req*k); got=0
    while got<k:
        while True:
            i=buf.find(b"\r\n\r\n")
            if i<0: buf+=s.recv(1<<20); continue
            head=buf[:i].decode(); L=int([l.split(":")[1] for l in head.split("\r\n") if l.lower().startswith("content-length")][0])
            while len(buf)<i+4+L: buf+=s.recv(1<<20)
            buf=buf[i+4+L:]; got+=1; break
    done+=k
PY
  else
    h2load -n $2 -c 4 -m 16 -H 'accept-encoding: gzip' http://127.0.0.1:$port/index.html > h2load.$2.txt 2>&1
    grep -q "succeeded, 0 failed\|$2 succeeded" h2load.$2.txt || grep "requests:" h2load.$2.txt
  fi
  kill -TERM $pid; wait $pid
  grep "^summary:" cg.$1.$2 | awk '{print $2}'
}
for mode in h1 h2; do
  a=$(run $mode 20000); b=$(run $mode 60000)
  echo "$mode: $(( (b - a) / 40000 )) instructions per request ($a at 20000, $b at 60000)"
done
