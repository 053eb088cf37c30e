//! `--listen` as people type it: `:PORT` answers on every address (IPv4 and
//! IPv6), `HOST:PORT` on each address the name resolves to, literal
//! addresses as before; an unusable value is one line naming it and why.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::Duration;

use common::*;

/// Why this machine cannot serve on `[::1]`, if it cannot.
fn no_ipv6_loopback() -> Option<String> {
    std::net::TcpListener::bind("[::1]:0")
        .err()
        .map(|e| e.to_string())
}

/// The addresses of the URLs in the start-up line.
fn announced(server: &Server) -> Vec<SocketAddr> {
    server
        .startup
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("http://")?.strip_suffix('/'))
        .map(|addr| addr.parse().unwrap())
        .collect()
}

/// A `GET /` to `addr` (an unspecified address: its loopback) answers.
fn assert_answers(addr: SocketAddr) {
    let mut target = addr;
    if addr.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => [127, 0, 0, 1].into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let mut s = TcpStream::connect(target).unwrap_or_else(|e| panic!("{target}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap_or_else(|| panic!("{target}: no response"));
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO), "{target}");
}

#[test]
fn every_form_of_address_answers() {
    let ipv6 = no_ipv6_loopback();
    if let Some(why) = &ipv6 {
        println!("no IPv6 loopback ({why}): checking the IPv4 addresses only");
    }
    let localhost: Vec<SocketAddr> = ("localhost", 0).to_socket_addrs().unwrap().collect();
    let mut cases: Vec<(&str, Vec<SocketAddr>)> = vec![
        (":0", vec!["0.0.0.0:0".parse().unwrap()]),
        ("localhost:0", localhost),
        ("127.0.0.1:0", vec!["127.0.0.1:0".parse().unwrap()]),
    ];
    if ipv6.is_none() {
        cases[0].1.push("[::]:0".parse().unwrap());
        cases.push(("[::1]:0", vec!["[::1]:0".parse().unwrap()]));
    } else {
        cases[1].1.retain(SocketAddr::is_ipv4);
    }
    for (value, expected) in cases {
        let server = Server::launch(
            &["--dummy", "--threads", "1"],
            Launch {
                listen: vec![value.to_owned()],
                ..Launch::default()
            },
        );
        let found = announced(&server);
        // One free port for every address of the value.
        let expected: Vec<SocketAddr> = expected
            .into_iter()
            .map(|mut a| {
                a.set_port(server.port);
                a
            })
            .collect();
        assert_eq!(found, expected, "--listen {value}: {}", server.startup);
        for addr in found {
            assert_answers(addr);
        }
    }
}

#[test]
fn repeated_values_bind_each_address_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server::launch(
        &["--dummy", "--threads", "2"],
        Launch {
            listen: vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
            ],
            ..Launch::default()
        },
    );
    let found = announced(&server);
    let v4 = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(found.iter().filter(|a| **a == v4).count(), 1, "{found:?}");
    assert_answers(v4);
}

#[test]
fn an_unusable_value_is_one_line_naming_it() {
    for (value, why) in [
        ("8080", "expected IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT"),
        (":99999", "port \"99999\" is not a number from 0 to 65535"),
        (
            "::1:8080",
            "an IPv6 address needs brackets, as in [::1]:8080",
        ),
        (
            "[nonsense]:80",
            "[nonsense] is not a bracketed IPv6 address",
        ),
        ("localhost:", "no port"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "serve",
                "--dummy",
                "--listen",
                "127.0.0.1:0",
                "--listen",
                value,
            ])
            .output()
            .expect("run kiln");
        assert!(!out.status.success(), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{value}: {err}");
        let prefix = format!("kiln: error: --listen {value:?}: {why}");
        assert!(err.starts_with(&prefix), "{value}: {err}");
        assert!(!err.contains("kiln: serving"), "{value}: started anyway");
    }
}

#[test]
fn a_port_below_1024_refused_to_a_user_says_how_to_get_one() {
    // As root the test runs kiln as nobody; as another user, as itself.
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let args = ["serve", "--dummy", "--listen", "127.0.0.1:81"];
    let out = if root {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", kiln])
            .args(args)
            .output()
    } else {
        Command::new(kiln).args(args).output()
    };
    let Ok(out) = out else {
        eprintln!("no setpriv to run kiln as nobody; skipped");
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let privileged = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .is_ok_and(|v| v.trim().parse::<u16>().is_ok_and(|start| start > 81));
    if !privileged || (root && !stderr.contains("kiln:")) {
        eprintln!("port 81 is not privileged here, or nobody cannot run {kiln}: {stderr}; skipped");
        return;
    }
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot listen on 127.0.0.1:81: a port below 1024 needs root")
            && stderr.contains("CAP_NET_BIND_SERVICE")
            && stderr.contains("from 1024 up"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
