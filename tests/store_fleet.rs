//! A fleet on one machine (issue 35): one MinIO on loopback
//! (tests/common/minio.rs), three `kiln serve s3://sites/prod/` nodes
//! (separate processes and cache folders, one bucket) behind HAProxy
//! (round robin, HTTP/1.1 keep-alive to the nodes), under continuous
//! load from client threads whose every response must be a 200 with one
//! whole version of the page, never a mix, never an error. Five deploys,
//! each served by every node (asked directly) within two sync intervals;
//! a fourth node started with an empty cache serves every site at once;
//! the store stopped while the load goes on. Skipped, saying so, without
//! MinIO or HAProxy (`./test` installs both). The nodes run on the
//! connection layer and with the TLS mode of the run (`KILN_TEST_IO`,
//! `KILN_TEST_TLS`): HAProxy speaks cleartext HTTP to them, the direct
//! checks speak TLS in TLS mode.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::minio::Minio;
use common::{Client, Launch, Server, add_plain};
use kiln::pack::{PackWriter, RouteKind};

/// How long anything the test waits for may take on a busy machine
/// (a failure, not a figure: the figures are asserted apart).
const PATIENCE: Duration = Duration::from_secs(30);

/// The nodes' `--sync-interval`, in seconds: each deploy must be served
/// by every node within twice this.
const SYNC_INTERVAL: f64 = 1.0;

/// The sites of the bucket; the first one is deployed five times.
const SITES: [&str; 3] = ["a.test", "b.test", "c.test"];

/// The versions of the deployed site: v1, then five deploys.
const VERSIONS: u32 = 6;

/// How long the store stays down while the load goes on. The issue says
/// 30 s; a shorter pause (several failed listings per node) tests the
/// same behaviour (cached sites never fail) without a 30 s test.
const OUTAGE: Duration = Duration::from_secs(5);

/// The client threads loading the fleet through HAProxy.
const LOADERS: usize = 3;

/// The body of `/page.txt` of `host` at `version`: about 56 KB (more
/// than one write on loopback), every version the same length, so that
/// a response mixing two versions would be a body of neither.
fn body(host: &str, version: u32) -> Vec<u8> {
    (0..2000)
        .flat_map(|line| format!("{host} v{version:02} line {line:05}\n").into_bytes())
        .collect()
}

/// Writes the pack of `host` at `version` into `dir`.
fn pack(dir: &Path, host: &str, version: u32) -> PathBuf {
    let path = dir.join(format!("{host}-v{version}.pack"));
    let mut w = PackWriter::create(&path).unwrap();
    let etag = format!("\"{host}-v{version}\"");
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/page.txt")],
        &etag,
        "text/plain",
        &body(host, version),
        200,
    );
    w.finish().unwrap();
    path
}

/// `kiln publish PACK s3://sites/prod/HOST.pack`.
fn publish(minio: &Minio, pack: &Path, host: &str) {
    minio.publish(pack, &format!("prod/{host}.pack"));
}

/// A node: `kiln serve s3://sites/prod/` with its own cache folder.
fn node(minio: &Minio, cache: &Path) -> Server {
    let interval = SYNC_INTERVAL.to_string();
    Server::launch(
        &[
            "s3://sites/prod/",
            "--store-endpoint",
            &minio.endpoint(),
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            &interval,
        ],
        Launch {
            env: minio.env(),
            ..Launch::default()
        },
    )
}

/// The HAProxy binary, or `None` (said on stderr).
fn haproxy_binary() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    let found = dirs.iter().map(|d| d.join("haproxy")).find(|p| p.is_file());
    if found.is_none() {
        eprintln!("skipped: haproxy is not installed (apt-get install haproxy, as ./test does)");
    }
    found
}

/// HAProxy in front of `backends` (cleartext ports); killed on drop.
struct Haproxy {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// Starts HAProxy on a listening socket bound here and passed as
    /// descriptor 3 (`bind fd@3`): no port to race for, and connections
    /// wait in its backlog until HAProxy is up.
    fn start(binary: &Path, backends: &[u16]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Round robin per request; idle connections to the nodes reused
        // by any client (`http-reuse always`); a request that met a
        // connection the node was closing is sent again (GET is safe to
        // retry), as a production balancer is set up.
        let mut config = String::from(
            "global\n    maxconn 512\n\
             defaults\n    mode http\n    option http-keep-alive\n    http-reuse always\n\
             \x20   timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\
             \x20   retries 3\n    retry-on all-retryable-errors\n\
             frontend fleet\n    bind fd@3\n    default_backend nodes\n\
             backend nodes\n    balance roundrobin\n\
             \x20   http-response set-header X-Node %s\n",
        );
        for (i, port) in backends.iter().enumerate() {
            config.push_str(&format!("    server node{} 127.0.0.1:{port}\n", i + 1));
        }
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let mut command = Command::new(binary);
        command
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        pass_as_fd3(&mut command, listener);
        let child = command.spawn().expect("start haproxy");
        Haproxy {
            port,
            child,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes `listener` descriptor 3 of `command`'s process.
fn pass_as_fd3(command: &mut Command, listener: TcpListener) {
    use std::os::fd::IntoRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let fd = listener.into_raw_fd();
    // SAFETY: fcntl and dup2 are async-signal-safe; dup2 leaves the new
    // descriptor open across exec.
    unsafe {
        command.pre_exec(move || {
            let high = libc::fcntl(fd, libc::F_DUPFD, 100);
            if high < 0 || libc::dup2(high, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(high);
            Ok(())
        })
    };
}

/// GET /page.txt of `host` on a keep-alive connection: the status, the
/// `X-Node` field (HAProxy's backend) and the body; `None` when no whole
/// response came.
fn get(reader: &mut BufReader<impl Read + Write>, host: &str) -> Option<(u16, String, Vec<u8>)> {
    let request = format!("GET /page.txt HTTP/1.1\r\nHost: {host}\r\n\r\n");
    reader.get_mut().write_all(request.as_bytes()).ok()?;
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let status = line.get(9..12)?.parse().ok()?;
    let mut length = 0;
    let mut node = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let field = line.trim_end();
        if field.is_empty() {
            break;
        }
        let (name, value) = field.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().ok()?;
        } else if name.eq_ignore_ascii_case("x-node") {
            node = value.trim().to_owned();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((status, node, body))
}

/// What the load threads saw.
#[derive(Default)]
struct Tally {
    /// Responses per node (HAProxy's name for it).
    per_node: BTreeMap<String, u64>,
    /// Every failed request: no response, a status other than 200, or a
    /// body that is no whole version.
    failures: Vec<String>,
}

/// The load: `LOADERS` threads doing keep-alive GETs through HAProxy
/// until `stop`, each response checked against the whole versions of
/// its site.
struct Load {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    tally: Arc<Mutex<Tally>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let tally = Arc::new(Mutex::new(Tally::default()));
        // Every version a response may be, per site.
        let known: Arc<BTreeMap<&str, Vec<Vec<u8>>>> = Arc::new(
            SITES
                .iter()
                .map(|&host| {
                    let last = if host == SITES[0] { VERSIONS } else { 1 };
                    (host, (1..=last).map(|v| body(host, v)).collect())
                })
                .collect(),
        );
        let threads = (0..LOADERS)
            .map(|n| {
                let (stop, requests, tally, known) = (
                    Arc::clone(&stop),
                    Arc::clone(&requests),
                    Arc::clone(&tally),
                    Arc::clone(&known),
                );
                std::thread::spawn(move || {
                    let connect = || {
                        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                        BufReader::new(s)
                    };
                    let mut connection = connect();
                    let mut i = n;
                    while !stop.load(Ordering::Relaxed) {
                        // Mostly the deployed site, the others too.
                        let host = SITES[if i % 2 == 0 { 0 } else { 1 + i / 2 % 2 }];
                        i += 1;
                        let got = get(&mut connection, host);
                        requests.fetch_add(1, Ordering::Relaxed);
                        let mut tally = tally.lock().unwrap();
                        match got {
                            Some((200, node, body)) if known[host].contains(&body) => {
                                *tally.per_node.entry(node).or_default() += 1;
                            }
                            Some((status, node, body)) => tally.failures.push(format!(
                                "{host}: {status} from {node:?}, a body of {} bytes that \
                                 is no whole version: {:?}",
                                body.len(),
                                String::from_utf8_lossy(&body[..body.len().min(80)])
                            )),
                            None => {
                                tally.failures.push(format!("{host}: no response"));
                                drop(tally);
                                connection = connect();
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            requests,
            tally,
            threads,
        }
    }

    /// Fails, saying what, if any request failed so far; `when` says at
    /// which step of the test.
    fn assert_no_failure(&self, when: &str) {
        let tally = self.tally.lock().unwrap();
        assert!(
            tally.failures.is_empty(),
            "{} failed requests through HAProxy {when}, the first: {:?}",
            tally.failures.len(),
            &tally.failures[..tally.failures.len().min(5)]
        );
    }

    /// Waits until `more` requests were answered since this call.
    fn wait_for_requests(&self, more: u64) {
        let from = self.requests.load(Ordering::Relaxed);
        let started = Instant::now();
        while self.requests.load(Ordering::Relaxed) < from + more {
            assert!(started.elapsed() < PATIENCE, "the load stalled");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the threads; what they saw.
    fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a load thread panicked");
        }
        Arc::try_unwrap(self.tally)
            .ok()
            .unwrap()
            .into_inner()
            .unwrap()
    }
}

/// A keep-alive connection straight to a node (TLS in TLS mode).
fn direct(node: &Server) -> BufReader<Client> {
    BufReader::new(node.connect())
}

/// Waits until every node serves `version` of the deployed site, asking
/// each directly (reconnecting when a connection ends); how long each
/// took since `published`.
fn wait_until_served(nodes: &[Server], version: u32, published: Instant) -> Vec<Duration> {
    let expected = body(SITES[0], version);
    let mut connections: Vec<_> = nodes.iter().map(direct).collect();
    let mut took: Vec<Option<Duration>> = vec![None; nodes.len()];
    while took.iter().any(Option::is_none) {
        for (i, node) in nodes.iter().enumerate() {
            if took[i].is_some() {
                continue;
            }
            match get(&mut connections[i], SITES[0]) {
                Some((200, _, body)) if body == expected => took[i] = Some(published.elapsed()),
                Some(_) => {}
                None => connections[i] = direct(node),
            }
        }
        assert!(
            published.elapsed() < PATIENCE,
            "v{version} not served by every node after {PATIENCE:?}: {took:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    took.into_iter().map(Option::unwrap).collect()
}

#[test]
fn three_nodes_behind_haproxy_follow_deploys_a_new_node_and_a_store_outage_without_one_failed_request()
 {
    let Some(haproxy) = haproxy_binary() else {
        return;
    };
    let Some(mut minio) = Minio::start() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let packs: Vec<PathBuf> = (1..=VERSIONS)
        .map(|v| pack(dir.path(), SITES[0], v))
        .collect();
    for host in SITES {
        publish(&minio, &pack(dir.path(), host, 1), host);
    }
    let nodes: Vec<Server> = (1..=3)
        .map(|n| node(&minio, &dir.path().join(format!("cache{n}"))))
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let balancer = Haproxy::start(&haproxy, &ports);
    let load = Load::start(balancer.port);
    load.wait_for_requests(30);
    load.assert_no_failure("before the first deploy");

    let mut delays = Vec::new();
    for version in 2..=VERSIONS {
        publish(&minio, &packs[version as usize - 1], SITES[0]);
        let published = Instant::now();
        let took = wait_until_served(&nodes, version, published);
        // Load goes on between deploys: each version is served a while.
        load.wait_for_requests(20);
        load.assert_no_failure(&format!("during the deploy of v{version}"));
        delays.push((version, took));
    }
    eprintln!("from publish to served, per deploy and node: {delays:?}");
    let bound = Duration::from_secs_f64(2.0 * SYNC_INTERVAL);
    for (version, took) in &delays {
        assert!(
            took.iter().all(|t| *t <= bound),
            "v{version} served by every node within {bound:?}: {took:?}"
        );
    }

    // A new node, empty cache: every site served as soon as it is up
    // (it waits for its first listing before serving).
    let fourth = node(&minio, &dir.path().join("cache4"));
    let mut connection = direct(&fourth);
    for host in SITES {
        let version = if host == SITES[0] { VERSIONS } else { 1 };
        let got = get(&mut connection, host).expect("a response from the fourth node");
        assert_eq!(got.0, 200, "{host} on the fourth node");
        assert!(
            got.2 == body(host, version),
            "{host} v{version} on the fourth node"
        );
    }

    // The store down: the load goes on, every request served from the
    // caches.
    minio.stop();
    for node in nodes.iter().chain([&fourth]) {
        node.wait_for_log(&["store down: cannot list s3://sites/prod/"]);
    }
    let down = Instant::now();
    while down.elapsed() < OUTAGE {
        load.wait_for_requests(10);
        load.assert_no_failure("while the store is down");
    }
    minio.resume();
    for node in nodes.iter().chain([&fourth]) {
        node.wait_for_log(&["store back: listed s3://sites/prod/"]);
    }
    let tally = load.stop();
    assert!(
        tally.failures.is_empty(),
        "failed requests: {:?}",
        tally.failures
    );
    // Round robin: each of the three nodes took its share.
    assert_eq!(tally.per_node.len(), 3, "{:?}", tally.per_node);
    eprintln!(
        "{} requests through HAProxy, per node {:?}; the test took {:?}",
        tally.per_node.values().sum::<u64>(),
        tally.per_node,
        started.elapsed()
    );
}
