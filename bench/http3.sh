#!/usr/bin/env bash
# HTTP/3 on one server core (CPU 0) with oha on the other (CPU 1): kiln against Caddy
# (GOMAXPROCS=1) on a 13-byte file, and kiln's own h2 over TLS (oha too) on the same file,
# both shapes.
# Prints requests (200s counted) per second and per server CPU-second. Usage: bench/http3.sh
# (KILN=target/release/kiln CADDY=~/go/bin/caddy DUR=8 ROUNDS=3); stands in for HTTP/3 cases
# in bench/run until those exist (oha waits out the idle timeout after each run: ~40 s a case).
set -euo pipefail
KILN=${KILN:-target/release/kiln}
CADDY=${CADDY:-$HOME/go/bin/caddy}
DUR=${DUR:-8}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/site"
printf 'Hello, world!' > "$work/site/hello.txt"
"$KILN" build "$work/site" -o "$work/site.pack" >/dev/null 2>&1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
cat > "$work/Caddyfile" <<CADDY
{
	admin off
	auto_https off
	persist_config off
	servers {
		protocols h1 h2 h3
		timeouts {
			idle 300s
		}
	}
}
https://127.0.0.1:9443 {
	tls $work/cert.pem $work/key.pem
	root * $work/site
	file_server
}
CADDY
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)
start_server() {
  case $1 in
    kiln) taskset -c 0 "$KILN" serve "$work/site.pack" --listen-tls 127.0.0.1:9443 \
            --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" --threads 1 \
            --user root 2>"$work/$1.log" & ;;
    caddy) GOMAXPROCS=1 taskset -c 0 "$CADDY" run --config "$work/Caddyfile" \
            --adapter caddyfile >"$work/$1.log" 2>&1 & ;;
  esac
  pid=$!
  sleep 2
}
run_case() { # server client conns streams
  start_server "$1"
  local url=https://127.0.0.1:9443/hello.txt

  local t0 c0 t1 c1 ok
  t0=$(date +%s.%N); c0=$(cpu_ticks $pid)
  taskset -c 1 oha --no-tui --insecure --http-version "$2" -z "${DUR}s" -c "$3" -p "$4" \
    --output-format json "$url" > "$work/out.json" 2>/dev/null || true
  t1=$(date +%s.%N); c1=$(cpu_ticks $pid)
  kill $pid; wait $pid 2>/dev/null || true
  ok=$(python3 -c "import json,sys; d=json.load(open('$work/out.json')); print(d['statusCodeDistribution'].get('200',0))")
  python3 -c "
ok=$ok; wall=$t1-$t0; cpu=($c1-$c0)/$tick
print(f'$1 h$2 c$3x$4: {ok} x 200, {ok/$DUR:,.0f} req/s over the {$DUR} s run (oha then waits out the idle timeout), server CPU {cpu:.2f} s, {ok/max(cpu,1e-9):,.0f} req per server CPU-s')"
}
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round"
  run_case kiln 3 16 8
  run_case caddy 3 16 8
  run_case kiln 3 128 16
  run_case caddy 3 128 16
  run_case kiln 2 16 8
  run_case kiln 2 128 16
done
