//! A folder of more sites than the server may open files (kiln issue 35:
//! 25,000 packs under a limit of 20,000 once ended the server with
//! `Too many open files`). A pack is served from its mapping, which needs
//! no descriptor: packs keep theirs within a quarter of RLIMIT_NOFILE
//! (`serve::pack_limits`), the rest are mapped only. With the limit (soft and
//! hard) at 256 and 600 sites, on both back ends: every site answers with
//! its own content by Host (every body sent as a file range, so that the
//! packs without a descriptor go out of their mapping and those with one
//! by `sendfile` or `splice`), nothing says `Too many open files`, and the
//! server stays up; a pack beyond the budget replaced by rename is served
//! new, and one written in place (`cp`) is survived and then served new.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const SITES: usize = 600;
const FD_LIMIT: u64 = 256;

fn host(i: usize) -> String {
    format!("s{i:03}.example")
}

/// `/version.txt` of `host` on `client`, kept alive: status and body.
fn version_on(client: &mut Client, host: &str) -> (u16, String) {
    // One write: pieces of a request would wait for the server's delayed
    // acknowledgement of the first (Nagle), 40 ms a request.
    let request = format!("GET /version.txt HTTP/1.1\r\nHost: {host}\r\n\r\n");
    client.write_all(request.as_bytes()).unwrap();
    let r = read_response(client, false).expect("a response");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Waits (bounded) until `host` answers `want`, on fresh connections.
fn wait_for(server: &Server, host: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = version_on(&mut server.connect(), host);
        if got == (200, want.to_owned()) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{host} still answers {got:?}, not {want:?}; stderr:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_sites(dir: &Path) {
    for i in 0..SITES {
        version_pack(&dir.join(format!("{}.pack", host(i))), &host(i));
    }
}

#[test]
fn more_sites_than_the_descriptor_limit_are_each_served() {
    let dir = tempfile::tempdir().unwrap();
    let sites = dir.path().join("sites");
    std::fs::create_dir(&sites).unwrap();
    write_sites(&sites);
    for backend in ["epoll", "uring"] {
        let server = Server::start_with_fd_limit(
            &[
                sites.to_str().unwrap(),
                "--threads",
                "1",
                "--io",
                backend,
                "--sendfile-min",
                "1",
            ],
            Some(FD_LIMIT),
        );
        let mut client = server.connect();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        for i in 0..SITES {
            assert_eq!(
                version_on(&mut client, &host(i)),
                (200, host(i)),
                "{backend}: site {i}; stderr:\n{}",
                server.stderr_text()
            );
        }
        let log = server.stderr_text();
        assert!(
            log.contains(&format!("{SITES} sites")) && log.contains("served from their mapping"),
            "{backend}: {log}"
        );

        // The last sites are beyond the budget (sites load in name order).
        let renamed = host(SITES - 1);
        let temp = dir.path().join("new.pack");
        version_pack(&temp, "renamed");
        std::fs::rename(&temp, sites.join(format!("{renamed}.pack"))).unwrap();
        wait_for(&server, &renamed, "renamed");

        let copied = host(SITES - 2);
        version_pack(&temp, "written in place");
        std::fs::copy(&temp, sites.join(format!("{copied}.pack"))).unwrap();
        wait_for(&server, &copied, "written in place");

        // The others still answer, on the connection opened before.
        for i in [0, SITES / 2, SITES - 3] {
            assert_eq!(version_on(&mut client, &host(i)), (200, host(i)));
        }
        let log = server.stderr_text();
        assert!(!log.contains("Too many open files"), "{backend}: {log}");
        let mut server = server;
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "{backend}: the server ended: {log}"
        );
        // Each back end starts from the same packs.
        version_pack(&sites.join(format!("{renamed}.pack")), &renamed);
        version_pack(&sites.join(format!("{copied}.pack")), &copied);
    }
}
