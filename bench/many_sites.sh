#!/bin/bash
# A folder of many tiny sites (kiln issue 35): bench/many_sites.sh
# KILN_BINARY [SITES [NOFILE]]. Builds one tiny pack and copies it to
# SITES (10,000) files `sNNNNNN.example.pack`, starts `kiln serve` on the
# folder under `prlimit --nofile=NOFILE:NOFILE` (20,000; soft and hard),
# and prints the time from exec to the start-up line, the server's RSS
# (all, anonymous, file-backed: the packs' pages read by the verification
# are file-backed) from /proc after start, per site, its open descriptors,
# whether it logged `Too many open files`, how many sites it could not
# map (`vm.max_map_count`), and whether the first and the last site answer.
set -u
K=$(realpath "$1"); N=${2:-10000}; NOFILE=${3:-20000}
W=$(mktemp -d); trap 'kill $srv 2>/dev/null; rm -rf "$W"' EXIT
srv=
mkdir "$W/site" "$W/sites"
printf '<p>Hello</p>' > "$W/site/index.html"
"$K" build "$W/site" -o "$W/tiny.pack" -q
python3 -c 'import shutil, sys
for i in range(int(sys.argv[2])): shutil.copyfile(sys.argv[1] + "/tiny.pack", sys.argv[1] + "/sites/s%06d.example.pack" % i)' "$W" "$N"
chmod -R a+rX "$W"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
find "$W/sites" -type f -exec cat {} + > /dev/null # warm page cache: the start-up, not the disk
port=$((20000 + RANDOM % 20000))
start=$(date +%s.%N)
prlimit --nofile="$NOFILE:$NOFILE" "$K" serve "$W/sites" --listen 127.0.0.1:$port --threads 2 \
  > /dev/null 2> "$W/serve.err" &
srv=$!
until grep -q "^kiln: serving" "$W/serve.err"; do
  kill -0 $srv 2>/dev/null || { echo "the server ended:"; tail -3 "$W/serve.err"; exit 1; }
  sleep 0.01
done
ready=$(date +%s.%N)
sleep 0.5
kb() { awk -v k="$1:" '$1 == k {print $2}' /proc/$srv/status; }
rss=$(kb VmRSS); anon=$(kb RssAnon); file=$(kb RssFile)
fds=$(ls /proc/$srv/fd | wc -l)
emfile=$(grep -c "Too many open files" "$W/serve.err")
unmapped=$(grep -c "not mapped" "$W/serve.err")
first=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: s000000.example" http://127.0.0.1:$port/)
last=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: s$(printf %06d $((N - 1))).example" http://127.0.0.1:$port/)
awk -v n="$N" -v t0="$start" -v t1="$ready" -v rss="$rss" -v anon="$anon" -v file="$file" \
  -v fds="$fds" -v emfile="$emfile" -v unmapped="$unmapped" -v first="$first" -v last="$last" -v nofile="$NOFILE" 'BEGIN {
  printf "%d sites, nofile %d: ready in %.2f s; RSS %.1f MB (anon %.1f, file %.1f), %.2f KB per site (anon %.2f); %d descriptors open; \"Too many open files\" %d times; %d sites not mapped; first site %s, last %s\n",
    n, nofile, t1 - t0, rss / 1024, anon / 1024, file / 1024, rss / n, anon / n, fds, emfile, unmapped, first, last }'
