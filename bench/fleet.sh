#!/bin/bash
# A fleet's figures (kiln issue 35), against MinIO on loopback:
#
#   bench/fleet.sh [KILN_BINARY [PACKS]]
#
# KILN_BINARY: an optimised build (default target/release/kiln; `cargo
# build --profile quick` is release without fat LTO); PACKS: the packs of
# the listing bench (10,000). MinIO is found on PATH, in $GOPATH/bin or
# ~/go/bin (./test builds it). Everything runs in a temporary folder,
# removed at the end; the script stops by itself (every wait has a
# deadline, the whole is bounded by `timeout`) and writes its figures
# to stdout:
#
# (a) publish to "every node serves it": three nodes (`kiln serve
#     s3://sites/fleet/`, own cache folders), --sync-interval 1 and 5;
#     ten deploys each, each after a random pause within one interval (so
#     that a deploy lands at any phase of the nodes' listings); the time
#     from `kiln publish` returning until each node, asked directly over
#     keep-alive HTTP every 5 ms, answers the new version: p50 and max of
#     the slowest node per deploy, and of every node.
# (b) the listing cost: PACKS small packs uploaded with one `curl
#     --parallel --aws-sigv4` (64 at a time), then `kiln store sync` on
#     them: its first sync (list, fetch, verify, fsync and rename every
#     pack, write the state file), one fetch at a time then 8 at a time
#     (the default; two empty caches), then three listing passes when nothing
#     changed (a byte on its standard input lists at once, as the server's
#     SIGHUP; done when the state file's `listed` time moves), its RSS;
#     then `kiln serve s3://…` on the warm cache, under a descriptor limit
#     of 20,000 (soft and hard): the time to its start-up line, its RSS,
#     how many of 100 sites sampled over the names answer 200, and how
#     often it logged `Too many open files` and packs beyond
#     `vm.max_map_count`.
# (c) one pack of 100 KB and one of 10 MB (incompressible): five deploys
#     each on one node, SIGHUP sent as `kiln publish` returns; the time to
#     the new version served, and the fetch time the node records.
# (d) cold sites (`--cache-size`): 20 sites of a 100 KB pack and 20 of a
#     10 MB one (incompressible), each set on a node whose cache holds
#     one and a half packs; the time from a request for a site not cached
#     to its response (the fetch asked, the pack fetched, verified,
#     renamed in, loaded; the least recently used pack evicted), over a
#     keep-alive connection: p50, p99 (of 20: the max), and the fetch
#     alone as the store client counts it.
# FLEET_PARTS=abcd (the default) picks the parts to run; FLEET_SERIAL=0
# skips part b's one-at-a-time first sync.
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=$(realpath "${1:-target/release/kiln}")
packs=${2:-10000}
minio=$(PATH="$PATH:${GOPATH:-$HOME/go}/bin" command -v minio) \
    || { echo "fleet.sh: minio not found (go install github.com/minio/minio@VERSION)" >&2; exit 1; }
echo "# bench/fleet.sh $kiln $packs ($(date -u +%FT%TZ), $(nproc) cores)"
echo "# load before: $(uptime)"
timeout 1500 python3 - "$kiln" "$minio" "$packs" <<'PY'
import atexit, http.client, os, random, resource, signal, socket, statistics, subprocess, sys, tempfile, time

kiln, minio_bin, npacks = sys.argv[1], sys.argv[2], int(sys.argv[3])
work = tempfile.TemporaryDirectory(prefix="kiln-fleet-")
W = work.name
USER, PASSWORD = "kilnbench", "kilnbench-secret"
ENV = dict(os.environ, AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=PASSWORD, AWS_REGION="us-east-1")
children = []

def cleanup():
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
    work.cleanup()

# Stopped by `timeout` or ^C: the servers and MinIO go too.
atexit.register(cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit("fleet.sh: stopped"))

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def wait(what, done, limit=120, step=0.005):
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > limit:
            sys.exit(f"fleet.sh: {what} not done after {limit} s")
        time.sleep(step)

def curl(*args):
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                          "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{USER}:{PASSWORD}", *args],
                         capture_output=True, text=True)
    return out.stdout

mport = free_port()
endpoint = f"http://127.0.0.1:{mport}"
os.makedirs(f"{W}/minio")
children.append(subprocess.Popen(
    [minio_bin, "server", f"{W}/minio", "--quiet", "--address", f"127.0.0.1:{mport}",
     "--console-address", "127.0.0.1:0"],
    env=dict(os.environ, MINIO_ROOT_USER=USER, MINIO_ROOT_PASSWORD=PASSWORD,
             MINIO_BROWSER="off", MINIO_UPDATE="off"),
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
wait("MinIO's start", lambda: curl(endpoint + "/") == "200", step=0.1)
assert curl("-X", "PUT", endpoint + "/sites") == "200"

def build(name, files):
    src = f"{W}/src-{name}"
    os.makedirs(src, exist_ok=True)
    for path, data in files.items():
        with open(f"{src}/{path}", "wb") as f:
            f.write(data)
    pack = f"{W}/{name}.pack"
    subprocess.run([kiln, "build", src, "-o", pack, "-q"], check=True)
    return pack

def publish(pack, key):
    subprocess.run([kiln, "publish", pack, f"s3://sites/{key}", "--store-endpoint", endpoint],
                   env=ENV, check=True, stdout=subprocess.DEVNULL)

def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0

def kids(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []

def raise_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))

class Node:
    def __init__(self, prefix, cache, interval, extra=()):
        self.port = free_port()
        self.log = f"{cache}.log"
        args = [kiln, "serve", f"s3://sites/{prefix}/", "--store-endpoint", endpoint,
                "--cache-dir", cache, "--sync-interval", str(interval),
                "--listen", f"127.0.0.1:{self.port}", "--threads", "1", *extra]
        if os.geteuid() == 0:
            args += ["--user", "root"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"), preexec_fn=raise_nofile)
        children.append(self.proc)
        wait("a node's start", lambda: "kiln: serving" in open(self.log).read(), limit=300, step=0.01)
        self.ready = time.monotonic() - self.started
        self.conn = None

    def get(self, host, path="/version.txt"):
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.conn.request("GET", path, headers={"Host": host})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.conn = None
        return 0, b""

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

def ms(seconds):
    return f"{seconds * 1000:.0f} ms"

def part_a():
    # Publish to served on every node.
    host = "fleet.test"
    version = 0
    def next_pack():
        nonlocal version
        version += 1
        return build(f"fleet-v{version}", {"index.html": b"<p>fleet</p>", "version.txt": f"v{version}".encode()}), f"v{version}".encode()

    pack, _ = next_pack()
    publish(pack, f"fleet/{host}.pack")
    for interval in (1, 5):
        nodes = [Node("fleet", f"{W}/a{interval}-cache{n}", interval) for n in range(3)]
        slowest, each = [], []
        for _ in range(10):
            pack, body = next_pack()
            time.sleep(random.uniform(0, interval))
            publish(pack, f"fleet/{host}.pack")
            published = time.monotonic()
            took = [None] * len(nodes)
            def all_served():
                for i, node in enumerate(nodes):
                    if took[i] is None and node.get(host) == (200, body):
                        took[i] = time.monotonic() - published
                return all(t is not None for t in took)
            wait("a deploy served by every node", all_served, limit=10 * interval + 30)
            slowest.append(max(took))
            each.extend(took)
        print(f"(a) --sync-interval {interval}, 3 nodes, 10 deploys: publish to every node serving it "
              f"p50 {ms(pct(slowest, 50))}, max {ms(max(slowest))}; per node p50 {ms(pct(each, 50))}, "
              f"min {ms(min(each))}, max {ms(max(each))}")
        for node in nodes:
            node.stop()

def part_b():
    # A bucket of many packs.
    tiny = build("tiny", {"index.html": b"<p>Hello</p>"})
    config = f"{W}/upload.curl"
    with open(config, "w") as f:
        for i in range(npacks):
            f.write(f'upload-file = "{tiny}"\nurl = "{endpoint}/sites/many/s{i:06d}.test.pack"\n'
                    f'output = "/dev/null"\n')
    started = time.monotonic()
    subprocess.run(["curl", "-s", "--fail", "--parallel", "--parallel-max", "64", "--aws-sigv4",
                    "aws:amz:us-east-1:s3", "--user", f"{USER}:{PASSWORD}", "-K", config],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"(b) {npacks} packs of {os.path.getsize(tiny)} bytes uploaded by one curl --parallel "
          f"(64 at a time) in {time.monotonic() - started:.1f} s")

    def first_sync(cache, parallel):
        state = f"{cache}/.kiln-store/state"
        def listed():
            # The `listed MS` record (the file begins with the store's
            # URL and place).
            try:
                with open(state) as f:
                    return next(int(l.split()[1]) for l in f if l.startswith("listed "))
            except (OSError, IndexError, ValueError, StopIteration):
                return 0
        args = [kiln, "store", "sync", "s3://sites/many/", "--store-endpoint", endpoint, "--cache-dir", cache,
                "--sync-interval", "3600", "--parallel-fetches", str(parallel)]
        sync_log = open(f"{cache}-sync.log", "w")
        started = time.monotonic()
        sync = subprocess.Popen(args, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=sync_log, preexec_fn=raise_nofile)
        children.append(sync)
        wait("the first sync", lambda: listed() > 0, limit=900, step=0.05)
        first = time.monotonic() - started
        cached = sum(1 for name in os.listdir(cache) if name.endswith(".pack"))
        print(f"(b) kiln store sync, first sync of {npacks} packs (fetch, verify, fsync, rename each; "
              f"{parallel} at a time): "
              f"{first:.1f} s, {cached} packs in the cache ({first / max(cached, 1) * 1000:.2f} ms a pack)")
        return sync, listed

    # One at a time (as before fetches were parallel), then 8 (the
    # default); FLEET_SERIAL=0 skips the first (100,000 packs one at a
    # time take minutes).
    if os.environ.get("FLEET_SERIAL", "1") != "0":
        sync, _ = first_sync(f"{W}/many-cache-1", 1)
        sync.terminate()
        sync.wait(timeout=30)
    cache = f"{W}/many-cache"
    sync, listed = first_sync(cache, 8)
    passes = []
    for _ in range(3):
        before = listed()
        asked = time.monotonic()
        sync.stdin.write(b"list\n")
        sync.stdin.flush()
        wait("a listing pass", lambda: listed() != before, limit=120, step=0.002)
        passes.append(time.monotonic() - asked)
    worker = kids(sync.pid)
    worker_rss = rss_kb(worker[0]) if worker else 0
    print(f"(b) one listing pass over {npacks} unchanged objects (list, compare, write the state file): "
          + ", ".join(ms(p) for p in passes)
          + f"; RSS of the worker {worker_rss / 1024:.1f} MB, of the supervisor {rss_kb(sync.pid) / 1024:.1f} MB")
    # The supervisor ends on SIGTERM (or its parent, the server, gone).
    sync.terminate()
    sync.wait(timeout=30)

    node = Node("many", cache, 5)
    time.sleep(0.5)
    fields = {f: rss_kb(node.proc.pid, f) for f in ("VmRSS", "RssAnon", "RssFile")}
    # A hundred sites spread over the names, and what the log says of
    # the descriptor limit (20,000, as raise_nofile sets it).
    sample = range(0, npacks, max(1, npacks // 100))
    served = sum(node.get(f"s{i:06d}.test", "/")[0] == 200 for i in sample)
    log = open(node.log).read()
    emfile = log.count("Too many open files")
    unmapped = log.count("vm.max_map_count")
    print(f"(b) kiln serve s3://sites/many/ on the warm cache: start-up line after {node.ready:.2f} s; "
          f"server RSS {fields['VmRSS'] / 1024:.1f} MB (anon {fields['RssAnon'] / 1024:.1f}, file "
          f"{fields['RssFile'] / 1024:.1f}), {fields['VmRSS'] / npacks:.2f} KB a site; {served} of "
          f"{len(sample)} sites sampled answer 200; `Too many open files` {emfile} times (nofile 20000); "
          f"{unmapped} lines on vm.max_map_count ({open('/proc/sys/vm/max_map_count').read().strip()})")
    node.stop()

def part_c():
    # A 100 KB and a 10 MB pack, publish to served on one node (SIGHUP at once).
    sizes = {"kb100.test": 100 * 1000, "mb10.test": 10 * 1000 * 1000}
    blobs = {h: os.urandom(n) for h, n in sizes.items()}
    for h in sizes:
        publish(build(f"{h}-v0", {"blob.bin": blobs[h], "version.txt": b"v0"}), f"sizes/{h}.pack")
    node = Node("sizes", f"{W}/sizes-cache", 60)
    def object_line(h):
        # The state file's record of the object (its fetch time), written
        # after the listing's fetches.
        with open(f"{W}/sizes-cache/.kiln-store/state") as f:
            return next((l for l in f if l.startswith(f"object {h}.pack ")), "")
    for h in sizes:
        took, fetch = [], []
        for v in range(1, 6):
            pack = build(f"{h}-v{v}", {"blob.bin": blobs[h], "version.txt": f"v{v}".encode()})
            previous = object_line(h)
            publish(pack, f"sizes/{h}.pack")
            published = time.monotonic()
            node.proc.send_signal(signal.SIGHUP)
            wait("a pack served", lambda: node.get(h) == (200, f"v{v}".encode()), limit=60)
            took.append(time.monotonic() - published)
            wait("the state file", lambda: object_line(h) != previous)
            fetch.append(int(object_line(h).split()[4]))
        print(f"(c) a {os.path.getsize(pack) / 1e6:.2f} MB pack: publish, SIGHUP, to served on a node: "
              f"p50 {ms(pct(took, 50))}, max {ms(max(took))}; of which the fetch (GET, verify, fsync, "
              f"rename) p50 {statistics.median(fetch):.0f} ms, max {max(fetch)} ms (5 deploys)")
    node.stop()

def part_d():
    # Cold sites: a request for a site the cache does not hold waits for it.
    for label, size in (("100 KB", 100 * 1000), ("10 MB", 10 * 1000 * 1000)):
        prefix = f"cold{size}"
        hosts = [f"c{i:02d}.test" for i in range(21)]
        blob = os.urandom(size)
        for h in hosts:
            publish(build(f"{prefix}-{h}", {"blob.bin": blob, "version.txt": h.encode()}),
                    f"{prefix}/{h}.pack")
        pack_size = os.path.getsize(f"{W}/{prefix}-{hosts[0]}.pack")
        cache = f"{W}/{prefix}-cache"
        node = Node(prefix, cache, 60,
                    ["--cache-size", str(pack_size * 3 // 2), "--fetch-timeout", "60"])
        took = []
        for h in hosts:
            if os.path.exists(f"{cache}/{h}.pack"):
                continue
            started = time.monotonic()
            status = node.get(h)
            took.append(time.monotonic() - started)
            if status != (200, h.encode()):
                sys.exit(f"fleet.sh: {h} answered {status}; the node's log ends:\n"
                         + "".join(open(node.log).readlines()[-40:]))
        with open(f"{cache}/.kiln-store/state") as f:
            cold = next(l.split() for l in f if l.startswith("cold "))
        fetches, fetch_ms = int(cold[1]), int(cold[2])
        print(f"(d) a cold site's first response, {label} pack ({pack_size} bytes; {len(took)} sites, "
              f"a cache of 1.5 packs: each request evicts one): p50 {ms(pct(took, 50))}, "
              f"p99 {ms(pct(took, 99))}; the fetch alone (GET, verify, fsync, rename) mean "
              f"{fetch_ms / max(fetches, 1):.0f} ms over {fetches}")
        node.stop()

parts = os.environ.get("FLEET_PARTS", "abcd")
for name, part in (("a", part_a), ("b", part_b), ("c", part_c), ("d", part_d)):
    if name in parts:
        part()
PY
echo "# load after: $(uptime)"
