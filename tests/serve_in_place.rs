//! A pack written in place under load (`cp new.pack site.pack`: opened
//! with `O_TRUNC` and written, where a deploy renames), which once ended
//! the server (SIGBUS, or the sandbox refusing the `sigaction` of std's
//! SIGBUS path). Client threads ask for a large body (sent with
//! `sendfile`/`splice`, or sealed from the mapping over TLS) and a small
//! one (from the mapping) on keep-alive connections while the test
//! writes the served pack in place, at once (`std::fs::copy`, as `cp`)
//! or in slow chunks. Asserted: the server lives; every 200 body is the
//! old pack's or the new one's, byte for byte (never zeros, never mixed);
//! the new pack is served within a deadline of the write's end; the
//! warning naming the file and the fix is logged. With a read lease (the
//! tests own the pack) nothing is refused or cut; with leases refused
//! (`KILN_DEBUG_REFUSE_LEASES=1`, the bus-error path) responses may be
//! 503 or cut, never wrong. A single pack and a folder of sites; as
//! nobody, the lease on root's pack taken with the CAP_LEASE kept. A pack
//! cut short in place never verifies: the copy (or the 503) stays until a
//! whole one is written.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use kiln::pack::{PackWriter, RouteKind};

/// The bodies of one version of the site.
#[derive(Clone)]
struct Bodies {
    big: Vec<u8>,
    small: Vec<u8>,
}

impl Bodies {
    /// Version `v`: the same sizes as every other version (so that the
    /// packs' layouts match and a mixed body could pass for neither
    /// version only by its bytes).
    fn of(v: u8) -> Bodies {
        let big = (0..2 * 1024 * 1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ v.wrapping_mul(0x5b))
            .collect();
        let small = (0..3000u32)
            .map(|i| b'a' + ((i as u8).wrapping_add(v) % 26))
            .collect();
        Bodies { big, small }
    }

    fn body(&self, path: &str) -> &[u8] {
        if path == "/big.bin" {
            &self.big
        } else {
            &self.small
        }
    }
}

/// Writes the pack of `bodies` at `path`.
fn write_pack(path: &Path, bodies: &Bodies) {
    let mut w = PackWriter::create(path).unwrap();
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/big.bin")],
        "\"big\"",
        "application/octet-stream",
        &bodies.big,
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/small.txt")],
        "\"small\"",
        "text/plain",
        &bodies.small,
        200,
    );
    w.finish().unwrap();
}

/// How the served pack is written in place.
#[derive(Clone, Copy, Debug)]
enum Writer {
    /// `std::fs::copy`, as `cp` does (`O_TRUNC`, then the whole file).
    Copy,
    /// `O_TRUNC`, then 64 KiB at a time with a pause between.
    Chunked,
}

/// Where the pack is served from.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `kiln serve site.pack`.
    OnePack,
    /// `kiln serve SITES` with `SITES/_default.pack`.
    Folder,
}

/// Whether the server may take a read lease.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Leases {
    Taken,
    Refused,
}

/// Who the server runs as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum User {
    /// `--user root` when the tests run as root (`Launch::default`): the
    /// packs' owner, who may take leases without a capability.
    AsStarted,
    /// `nobody`, from root: a lease on root's pack needs the CAP_LEASE
    /// the sandbox keeps.
    Nobody,
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    old: AtomicUsize,
    new: AtomicUsize,
    unavailable: AtomicUsize,
    cut: AtomicUsize,
    /// What went wrong: a body neither version's, another status.
    wrong: Mutex<Vec<String>>,
}

/// One client: keep-alive requests for both paths in turn until `stop`;
/// a connection that fails is counted as cut and opened again.
fn client(
    server: Arc<Server>,
    old: Arc<Bodies>,
    new: Arc<Bodies>,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
) {
    let paths = ["/big.bin", "/small.txt"];
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let mut conn = server.connect();
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let path = paths[turn % 2];
            turn += 1;
            let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
            if conn.write_all(request.as_bytes()).is_err() {
                seen.cut.fetch_add(1, Ordering::Relaxed);
                break;
            }
            let Some(resp) = read_response(&mut conn, false) else {
                seen.cut.fetch_add(1, Ordering::Relaxed);
                break;
            };
            let counter = match resp.status {
                200 if resp.body == old.body(path) => &seen.old,
                200 if resp.body == new.body(path) => &seen.new,
                503 => {
                    let retry = resp.header("Retry-After");
                    if retry.as_deref() != Some("1") {
                        seen.wrong
                            .lock()
                            .unwrap()
                            .push(format!("503 with Retry-After {retry:?}"));
                    }
                    &seen.unavailable
                }
                status => {
                    seen.wrong.lock().unwrap().push(format!(
                        "{path}: {status} with {}, neither version's",
                        describe(&resp.body, old.body(path), new.body(path))
                    ));
                    continue;
                }
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a body that is neither version's holds: its length, its pages
/// of zeros, and how far it matches each version (a mixed body is one
/// version up to a point, then the other).
fn describe(body: &[u8], old: &[u8], new: &[u8]) -> String {
    let zero_pages = body
        .chunks(4096)
        .filter(|page| page.iter().all(|&b| b == 0))
        .count();
    let agrees = |version: &[u8]| {
        let first = body.iter().zip(version).position(|(a, b)| a != b);
        let last = body.iter().zip(version).rposition(|(a, b)| a != b);
        match (first, last) {
            (Some(first), Some(last)) => format!("differs from {first} to {last}"),
            _ => "agrees".to_owned(),
        }
    };
    format!(
        "{} bytes ({zero_pages} pages of zeros; old: {}; new: {})",
        body.len(),
        agrees(old),
        agrees(new)
    )
}

/// Writes `from` over `to` in place, as `writer` does.
fn write_in_place(from: &Path, to: &Path, writer: Writer) {
    match writer {
        Writer::Copy => {
            std::fs::copy(from, to).unwrap();
        }
        Writer::Chunked => {
            let bytes = std::fs::read(from).unwrap();
            let mut file = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(to)
                .unwrap();
            for chunk in bytes.chunks(64 * 1024) {
                file.write_all(chunk).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Waits up to 20 s for `want` in the server's log.
fn wait_for_log(server: &Server, want: &str) {
    let start = Instant::now();
    while !server.stderr_text().contains(want) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {want:?} in the log:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Serves the old pack (`layout`), loads it from four clients, writes the
/// new pack over it in place (`writer`) and checks what was served.
fn written_in_place_under_load(layout: Layout, writer: Writer, leases: Leases, user: User) {
    if user == User::Nobody && !is_root() {
        eprintln!("skipped: the switch to nobody needs the tests to run as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (old, new) = (Arc::new(Bodies::of(1)), Arc::new(Bodies::of(2)));
    let next = dir.path().join("next.pack");
    write_pack(&next, &new);
    let (served, site): (PathBuf, PathBuf) = match layout {
        Layout::OnePack => {
            let pack = dir.path().join("site.pack");
            (pack.clone(), pack)
        }
        Layout::Folder => {
            let sites = dir.path().join("sites");
            std::fs::create_dir(&sites).unwrap();
            (sites.join("_default.pack"), sites)
        }
    };
    write_pack(&served, &old);
    let env = match leases {
        Leases::Taken => Vec::new(),
        Leases::Refused => vec![("KILN_DEBUG_REFUSE_LEASES", "1".to_owned())],
    };
    let server = Arc::new(Server::launch(
        &[site.to_str().unwrap(), "--threads", "2"],
        Launch {
            env,
            stay_root: user == User::AsStarted,
            ..Launch::default()
        },
    ));
    assert_eq!(server.get("/small.txt", "").body, old.small);
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (server, old, new, seen, stop) = (
                Arc::clone(&server),
                Arc::clone(&old),
                Arc::clone(&new),
                Arc::clone(&seen),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || client(server, old, new, seen, stop))
        })
        .collect();
    // Under load before the write.
    let start = Instant::now();
    while seen.old.load(Ordering::Relaxed) < 20 {
        assert!(start.elapsed() < Duration::from_secs(20), "no load");
        std::thread::sleep(Duration::from_millis(10));
    }
    write_in_place(&next, &served, writer);
    let written = Instant::now();
    // The new pack served (both bodies), on fresh connections.
    loop {
        // Without a lease, a response cut because the pack went stale
        // under it is one of the outcomes allowed: asked again.
        let fresh = |path: &str| {
            let mut conn = server.connect();
            let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            conn.write_all(request.as_bytes()).unwrap();
            read_response(&mut conn, false)
                .is_some_and(|resp| resp.status == 200 && resp.body == new.body(path))
        };
        if fresh("/small.txt") && fresh("/big.bin") {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(20),
            "the new pack not served 20 s after it was written; log:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And under load after it.
    let new_before = seen.new.load(Ordering::Relaxed);
    while seen.new.load(Ordering::Relaxed) < new_before + 20 {
        assert!(
            written.elapsed() < Duration::from_secs(30),
            "no load after the write"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let mut server = Arc::try_unwrap(server).unwrap_or_else(|_| panic!("clients joined"));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server ended; log:\n{}",
        server.stderr_text()
    );
    wait_for_log(
        &server,
        &format!(
            "{} was written in place; deploy by rename (mv) instead",
            served.display()
        ),
    );
    let wrong = seen.wrong.lock().unwrap();
    let counts = format!(
        "old {}, new {}, 503 {}, cut {}",
        seen.old.load(Ordering::Relaxed),
        seen.new.load(Ordering::Relaxed),
        seen.unavailable.load(Ordering::Relaxed),
        seen.cut.load(Ordering::Relaxed)
    );
    assert!(wrong.is_empty(), "{counts}; {wrong:?}");
    if leases == Leases::Taken {
        let log = server.stderr_text();
        assert!(!log.contains("no read lease"), "{log}");
        // The copy served every request in flight and after, until the
        // new pack: nothing refused, nothing cut.
        assert_eq!(seen.unavailable.load(Ordering::Relaxed), 0, "{counts}");
        assert_eq!(seen.cut.load(Ordering::Relaxed), 0, "{counts}");
    }
    eprintln!("{layout:?}, {writer:?}, leases {leases:?}: {counts}");
    assert!(server.wait_exit(Duration::ZERO).is_none());
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_pack_copied_over_in_place_is_served_from_a_copy_until_the_new_one_verifies() {
    written_in_place_under_load(
        Layout::OnePack,
        Writer::Copy,
        Leases::Taken,
        User::AsStarted,
    );
}

#[test]
fn a_pack_written_in_place_slowly_is_served_from_a_copy_until_the_new_one_verifies() {
    written_in_place_under_load(
        Layout::OnePack,
        Writer::Chunked,
        Leases::Taken,
        User::AsStarted,
    );
}

#[test]
fn a_site_of_a_folder_written_in_place_is_served_from_a_copy() {
    written_in_place_under_load(
        Layout::Folder,
        Writer::Chunked,
        Leases::Taken,
        User::AsStarted,
    );
}

#[test]
fn without_a_lease_a_pack_copied_over_in_place_answers_503_and_cuts_never_wrong_bytes() {
    written_in_place_under_load(
        Layout::OnePack,
        Writer::Copy,
        Leases::Refused,
        User::AsStarted,
    );
}

#[test]
fn without_a_lease_a_pack_written_in_place_slowly_answers_503_and_cuts_never_wrong_bytes() {
    written_in_place_under_load(
        Layout::OnePack,
        Writer::Chunked,
        Leases::Refused,
        User::AsStarted,
    );
}

#[test]
fn without_a_lease_a_site_of_a_folder_written_in_place_answers_503_meanwhile() {
    written_in_place_under_load(
        Layout::Folder,
        Writer::Copy,
        Leases::Refused,
        User::AsStarted,
    );
}

#[test]
fn as_nobody_a_lease_on_roots_pack_is_taken_with_the_capability_kept() {
    written_in_place_under_load(
        Layout::OnePack,
        Writer::Chunked,
        Leases::Taken,
        User::Nobody,
    );
}

/// A pack cut short in place (a copy that stopped half-way) never
/// verifies: the site keeps answering from the copy of the previous pack
/// (with a lease) or with 503 (without), until a whole pack is written.
fn cut_short_in_place(leases: Leases) {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Bodies::of(1), Bodies::of(2));
    let (served, next) = (dir.path().join("site.pack"), dir.path().join("next.pack"));
    write_pack(&served, &old);
    write_pack(&next, &new);
    let env = match leases {
        Leases::Taken => Vec::new(),
        Leases::Refused => vec![("KILN_DEBUG_REFUSE_LEASES", "1".to_owned())],
    };
    let server = Server::launch(
        &[served.to_str().unwrap()],
        Launch {
            env,
            ..Launch::default()
        },
    );
    assert_eq!(server.get("/small.txt", "").body, old.small);
    let whole = std::fs::read(&next).unwrap();
    std::fs::write(&served, &whole[..whole.len() / 2]).unwrap();
    wait_for_log(&server, "still serving the previous pack");
    let resp = server.get("/small.txt", "");
    match leases {
        Leases::Taken => assert_eq!((resp.status, resp.body), (200, old.small.clone())),
        Leases::Refused => {
            assert_eq!(resp.status, 503);
            assert_eq!(resp.header("Retry-After").as_deref(), Some("1"));
        }
    }
    std::fs::write(&served, &whole).unwrap();
    let start = Instant::now();
    while server.get("/small.txt", "").body != new.small {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the whole pack not served; log:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.get("/big.bin", "").body, new.big);
}

#[test]
fn a_pack_cut_short_in_place_leaves_the_copy_serving_until_a_whole_one_is_written() {
    cut_short_in_place(Leases::Taken);
}

#[test]
fn without_a_lease_a_pack_cut_short_in_place_answers_503_until_a_whole_one_is_written() {
    cut_short_in_place(Leases::Refused);
}
