//! Certificates shared by a fleet: three `kiln serve s3://sites/prod/
//! --acme --acme-dir s3://sites/acme/` nodes, one MinIO bucket
//! (`common/minio.rs`) holding both the sites and the ACME state, one
//! Pebble (`common/pebble.rs`). Each node listens on its own loopback
//! address (127.0.0.1, .2, .3) with the same ports, and Pebble's DNS stub
//! says at which node Pebble validates each name.
//!
//! - The two sites get one certificate each from Pebble (its log counts
//!   the issuances: exactly two, whatever node won each name's lock), and
//!   every node serves both over HTTPS with the same certificate (the
//!   same serial), which curl verifies against Pebble's root.
//! - A site published while the fleet runs gets its certificate without a
//!   restart: only node 1 lists the bucket often (the others once an
//!   hour, until SIGHUP), so node 1 alone learns the site and orders it;
//!   Pebble validates it at node 2, which answers with the challenge
//!   node 1's client wrote into the bucket. Once nodes 2 and 3 list the
//!   bucket (SIGHUP), they serve the same certificate; Pebble issued three
//!   in all.
//!
//! Skips, saying so, where Pebble or MinIO is not installed.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::Minio;
use common::pebble::{self, Ca};
use common::{Launch, Server};

/// The sites at start, and the one published while the fleet runs.
const NAMES: [&str; 2] = ["a.fleet.test", "b.fleet.test"];
const ADDED: &str = "c.fleet.test";
/// The nodes' addresses.
const IPS: [&str; 3] = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
/// How long anything may take on a busy machine (three servers, their
/// ACME and store clients, MinIO and Pebble).
const PATIENCE: Duration = Duration::from_secs(120);

/// The page each site serves at `/version.txt`.
fn page(name: &str) -> String {
    format!("the site {name}")
}

/// A port free on every node's address.
fn port_free_everywhere() -> u16 {
    for _ in 0..100 {
        let port = pebble::free_port();
        if IPS.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok()) {
            return port;
        }
    }
    panic!("no port free on all of {IPS:?} (loopback addresses beyond 127.0.0.1 missing?)");
}

/// Publishes the site `name` into the bucket (the pack as it is).
fn publish(minio: &Minio, work: &Path, name: &str) {
    let pack = work.join(format!("{name}.pack"));
    common::version_pack(&pack, &page(name));
    minio.put_raw(&format!("prod/{name}.pack"), &pack);
}

/// One node: its own address, cache folder and ACME mirror; listing the
/// bucket every `interval` seconds.
fn node(
    minio: &Minio,
    work: &Path,
    ca: &Ca,
    i: usize,
    ports: (u16, u16),
    interval: &str,
) -> Server {
    let ip = IPS[i];
    let dir = work.join(format!("node{i}"));
    std::fs::create_dir(&dir).unwrap();
    let endpoint = minio.endpoint();
    let cache = dir.join("cache");
    let mirror = dir.join("acme");
    let listen_tls = format!("{ip}:{}", ports.1);
    Server::launch(
        &[
            "s3://sites/prod/",
            "--store-endpoint",
            &endpoint,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            interval,
            "--acme",
            "--acme-dir",
            "s3://sites/acme/",
            "--acme-cache-dir",
            mirror.to_str().unwrap(),
            "--acme-ca",
            &ca.url,
            "--acme-ca-root",
            ca.root.to_str().unwrap(),
            "--listen-tls",
            &listen_tls,
        ],
        Launch {
            listen: vec![format!("{ip}:{}", ports.0)],
            env: minio.env(),
            ..Launch::default()
        },
    )
}

/// The serial of the certificate node `ip` presents for `name`, if it
/// presents one Pebble issued for that name (a managed name without a
/// certificate yet is refused).
fn served_serial(ip: &str, port: u16, name: &str) -> Option<Vec<u8>> {
    let tcp = TcpStream::connect((ip, port)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let config = common::insecure_client_config(&[b"http/1.1"]);
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).ok()?;
    let conn = rustls::ClientConnection::new(config, server_name).ok()?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).ok()?;
    }
    let leaf = stream.conn.peer_certificates()?.first()?.to_vec();
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).ok()?;
    let for_name = cert
        .subject_alternative_name()
        .ok()??
        .value
        .general_names
        .iter()
        .any(|n| n.to_string() == format!("DNSName({name})"));
    let by_pebble = cert.issuer().to_string().contains("Pebble");
    (for_name && by_pebble).then(|| cert.raw_serial().to_vec())
}

/// Waits until `done` holds; panics otherwise, with every log.
fn wait(what: &str, nodes: &[Server], ca: &Ca, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > PATIENCE {
            let logs: Vec<String> = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| format!("node {i} ({}):\n{}", IPS[i], n.stderr_text()))
                .collect();
            panic!(
                "no {what} after {PATIENCE:?}\n{}\nCA:\n{}",
                logs.join("\n"),
                ca.log.text()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until each of `nodes` (by index) serves `name` with a Pebble
/// certificate; asserts it is the same one on all; returns its serial.
fn wait_for_one_certificate(
    nodes: &[Server],
    which: &[usize],
    ca: &Ca,
    tls_port: u16,
    name: &str,
) -> Vec<u8> {
    let mut serials = Vec::new();
    for &i in which {
        wait(
            &format!("certificate for {name} on node {i}"),
            nodes,
            ca,
            || served_serial(IPS[i], tls_port, name).is_some(),
        );
        serials.push(served_serial(IPS[i], tls_port, name).unwrap());
    }
    assert!(
        serials.windows(2).all(|w| w[0] == w[1]),
        "{name}: the nodes serve different certificates: {serials:02x?}"
    );
    serials.remove(0)
}

/// The root of the certificates Pebble issues, in a file.
fn issuing_root(ca: &Ca, work: &Path) -> std::path::PathBuf {
    let path = work.join("issuing-root.pem");
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--cacert"])
        .arg(&ca.root)
        .arg("--output")
        .arg(&path)
        .arg(format!("{}/roots/0", ca.management))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// `curl --cacert ROOT https://NAME:PORT/version.txt` at node `ip`.
fn curl(root: &Path, ip: &str, port: u16, name: &str) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--max-time", "10"])
        .arg("--cacert")
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:{ip}")])
        .arg(format!("https://{name}:{port}/version.txt"))
        .output()
        .expect("curl");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// How many certificates Pebble issued.
fn issued(ca: &Ca) -> usize {
    ca.log.count("Issued certificate serial")
}

/// Which nodes ordered `name` (their clients' log lines).
fn orderers(nodes: &[Server], name: &str) -> Vec<usize> {
    let line = format!("acme: {name}: ordering a certificate");
    (0..nodes.len())
        .filter(|&i| nodes[i].stderr_text().contains(&line))
        .collect()
}

#[test]
fn three_nodes_share_the_certificates_of_one_bucket() {
    let Some(tools) = pebble::tools() else { return };
    let Some(minio) = Minio::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let ports = (port_free_everywhere(), port_free_everywhere());
    // Certificates of 90 days: no renewal (ARI) falls within the test.
    let ca = pebble::start_ca(&tools, work.path(), ports.0, ports.1, 90 * 86_400);
    // Where Pebble validates each name: a.fleet.test at node 0, the others
    // at node 1.
    ca.resolve(NAMES[0], IPS[0]);
    ca.resolve(NAMES[1], IPS[1]);
    ca.resolve(ADDED, IPS[1]);
    for name in NAMES {
        publish(&minio, work.path(), name);
    }
    let started = Instant::now();
    let nodes: Vec<Server> = (0..3)
        .map(|i| {
            let interval = if i == 0 { "1" } else { "3600" };
            node(&minio, work.path(), &ca, i, ports, interval)
        })
        .collect();

    // Each name once, served by every node.
    let root = issuing_root(&ca, work.path());
    for name in NAMES {
        wait_for_one_certificate(&nodes, &[0, 1, 2], &ca, ports.1, name);
        for ip in IPS {
            assert_eq!(
                curl(&root, ip, ports.1, name),
                Ok(page(name)),
                "{name} at {ip}"
            );
        }
    }
    eprintln!(
        "acme_fleet: both sites served with their certificates by all 3 nodes {:.1} s after the nodes were started",
        started.elapsed().as_secs_f64()
    );
    // Long enough for a second order, had another node made one: every
    // client looks at each name at start, and again each 10 s while
    // another holds its lock.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(issued(&ca), 2, "CA:\n{}", ca.log.text());

    // A site published while running: node 0 alone lists the bucket
    // often, so it orders; Pebble validates at node 1.
    let answering = "ACME HTTP-01: answering 1 tokens";
    let answered_before = nodes[1].stderr_text().matches(answering).count();
    publish(&minio, work.path(), ADDED);
    let published = Instant::now();
    wait_for_one_certificate(&nodes, &[0], &ca, ports.1, ADDED);
    eprintln!(
        "acme_fleet: a site published while running served with its certificate by node 0 {:.1} s after its upload",
        published.elapsed().as_secs_f64()
    );
    assert_eq!(orderers(&nodes, ADDED), [0]);
    assert!(
        nodes[1].stderr_text().matches(answering).count() > answered_before,
        "node 1 never took node 0's challenge up:\n{}",
        nodes[1].stderr_text()
    );
    for node in &nodes[1..] {
        node.signal(libc::SIGHUP);
    }
    let signalled = Instant::now();
    let serial = wait_for_one_certificate(&nodes, &[0, 1, 2], &ca, ports.1, ADDED);
    eprintln!(
        "acme_fleet: nodes 1 and 2 serve it {:.1} s after SIGHUP",
        signalled.elapsed().as_secs_f64()
    );
    for ip in IPS {
        assert_eq!(
            curl(&root, ip, ports.1, ADDED),
            Ok(page(ADDED)),
            "{ADDED} at {ip}"
        );
    }
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(issued(&ca), 3, "CA:\n{}", ca.log.text());
    assert_eq!(orderers(&nodes, ADDED), [0]);
    assert_eq!(
        served_serial(IPS[2], ports.1, ADDED).as_deref(),
        Some(serial.as_slice())
    );
}

/// A lock left in the bucket by a node that died (its expiry passed) is
/// taken over, by a conditional update on its ETag, and the name ordered;
/// the lock is gone once the order is done.
#[test]
fn an_expired_lock_in_the_bucket_is_taken_over() {
    let Some(tools) = pebble::tools() else { return };
    let Some(minio) = Minio::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let ports = (port_free_everywhere(), port_free_everywhere());
    let ca = pebble::start_ca(&tools, work.path(), ports.0, ports.1, 90 * 86_400);
    publish(&minio, work.path(), NAMES[0]);
    let stale = work.path().join("stale.lock");
    let expired = serde_json::json!({ "owner": "gone 1 0123456789abcdef", "expires": pebble::unix_now() - 5 });
    std::fs::write(&stale, expired.to_string()).unwrap();
    let lock = format!("acme/locks/{}.lock", NAMES[0]);
    minio.put_raw(&lock, &stale);
    let nodes = vec![node(&minio, work.path(), &ca, 0, ports, "1")];
    wait_for_one_certificate(&nodes, &[0], &ca, ports.1, NAMES[0]);
    let log = nodes[0].stderr_text();
    assert!(
        log.contains(&format!(
            "acme: {}: took over the lock of \"gone 1 0123456789abcdef\"",
            NAMES[0]
        )),
        "{log}"
    );
    wait("the lock released", &nodes, &ca, || !minio.exists(&lock));
}
