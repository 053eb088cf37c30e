#!/bin/bash
# Instructions per request under callgrind (counts that do not depend on
# what else the machine does): bench/callgrind.sh KILN_BINARY OUT_DIR, for
# kiln BINARY serving examples/site over HTTP/1.1 keep-alive
# 16-deep pipelined (python client), h2c (h2load 4 x 16) and HTTPS
# keep-alive, one request at a time (python client, TLS 1.3 AES-128-GCM,
# one connection); the difference between N1 and N2 requests cancels
# start-up, shutdown and the handshake. MODES=h3: HTTP/3 (oha 1.16,
# CONNS x STREAMS, 128 x 16 by default) for a 13-byte file, as bench/run's
# h3-hello cases; the difference also cancels the handshakes and oha's
# wait for the 2-second idle timeout.
set -u
K=$(realpath "$1"); OUT=$2; SITE=$(realpath "$(dirname "$0")/../examples/site")
mkdir -p "$OUT/hello"; cd "$OUT"
"$K" build "$SITE" -o site.pack -q
printf 'Hello, world!' > hello/hello.txt
"$K" build hello -o hello.pack -q
run() { # mode n
  local port=$((20000 + RANDOM % 20000))
  local listen=(--listen 127.0.0.1:$port) scheme=http pack=site.pack
  [ $1 = tls ] && listen=(--listen-tls 127.0.0.1:$port --tls-self-signed) scheme=https
  [ $1 = h3 ] && listen=(--listen-tls 127.0.0.1:$port --tls-self-signed --keepalive-timeout 2) scheme=https pack=hello.pack
  valgrind --tool=callgrind --callgrind-out-file=cg.$1.$2 $K serve $pack "${listen[@]}" --threads 1 --io epoll --no-sandbox > /dev/null 2> serve.$1.$2.err &
  local pid=$!
  for i in $(seq 200); do curl -sk -o /dev/null $scheme://127.0.0.1:$port/ && break; sleep 0.1; done
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
  elif [ $1 = tls ]; then
    python3 - $port $2 <<'PY'
import socket, ssl, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
req = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\n\r\n"
buf = b""
for _ in range(n):
    s.sendall(req)
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            head = buf[:i].decode()
            L = int([l.split(":")[1] for l in head.split("\r\n") if l.lower().startswith("content-length")][0])
            if len(buf) >= i + 4 + L:
                buf = buf[i + 4 + L:]; break
        buf += s.recv(1 << 20)
PY
  elif [ $1 = h3 ]; then
    oha --no-tui --insecure --http-version 3 -n $2 -c ${CONNS:-128} -p ${STREAMS:-16} \
      --output-format json https://127.0.0.1:$port/hello.txt > oha.$2.json 2>&1
    python3 -c "import json,sys; d=json.load(open('oha.$2.json')); ok=d['statusCodeDistribution'].get('200',0); ok==$2 or print(f'{ok} of $2 answered 200')"
  else
    h2load -n $2 -c 4 -m 16 -H 'accept-encoding: gzip' http://127.0.0.1:$port/index.html > h2load.$2.txt 2>&1
    grep -q "succeeded, 0 failed\|$2 succeeded" h2load.$2.txt || grep "requests:" h2load.$2.txt
  fi
  kill -TERM $pid; wait $pid
  grep "^summary:" cg.$1.$2 | awk '{print $2}'
}
for mode in ${MODES:-h1 h2 tls}; do
  a=$(run $mode 20000); b=$(run $mode 60000)
  echo "$mode: $(( (b - a) / 40000 )) instructions per request ($a at 20000, $b at 60000)"
done
