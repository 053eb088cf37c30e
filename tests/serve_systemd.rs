//! systemd: listening sockets passed as systemd passes them (descriptors
//! 3…, `LISTEN_FDS`, `LISTEN_FDNAMES`, `LISTEN_PID`), told apart by name
//! (cleartext, TLS, metrics) and shared by every event loop; a
//! dual-stack TLS socket serving HTTP/3 over IPv4 and IPv6 (skipped,
//! saying so, without aioquic or IPv6 loopback); and the readiness
//! protocol (`NOTIFY_SOCKET`: READY, RELOADING, STOPPING).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::*;

fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

#[test]
fn sockets_from_systemd_are_served_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let (clear, tls, metrics) = (listener(), listener(), listener());
    let ports = [&clear, &tls, &metrics].map(|l| l.local_addr().unwrap().port());
    let server = Server::launch(
        &[
            pack.to_str().unwrap(),
            "--tls-self-signed",
            "--threads",
            "2",
        ],
        Launch {
            listen: Vec::new(),
            activate: vec![(clear, "http"), (tls, "https"), (metrics, "metrics")],
            ..Launch::default()
        },
    );
    assert_eq!(server.port, ports[0], "{}", server.startup);
    assert!(
        server
            .startup
            .contains(&format!("https://127.0.0.1:{}/", ports[1])),
        "{}",
        server.startup
    );
    assert!(
        server
            .stderr_text()
            .contains("listening on a socket from systemd: https"),
        "{}",
        server.stderr_text()
    );
    // Every loop accepts from the one socket: many connections, all
    // answered.
    for _ in 0..20 {
        assert_eq!(server.get("/hello.txt", "").body, HELLO);
    }
    let tcp = TcpStream::connect(("127.0.0.1", ports[1])).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut s = tls_client(tcp, "localhost", insecure_client_config(&[b"http/1.1"]));
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    let mut m = TcpStream::connect(("127.0.0.1", ports[2])).unwrap();
    m.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    m.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("\nkiln_connections_accepted_total "),
        "{text}"
    );
}

/// A listening TCP socket on `[::]` with `IPV6_V6ONLY` off, as systemd's
/// `BindIPv6Only=both` makes it, on a port whose UDP twin is free too;
/// `None` where the machine has no IPv6 loopback.
fn dual_stack_listener() -> Option<TcpListener> {
    use socket2::{Domain, Socket, Type};
    std::net::UdpSocket::bind("[::1]:0").ok()?;
    for _ in 0..64 {
        let socket = Socket::new(Domain::IPV6, Type::STREAM, None).ok()?;
        socket.set_only_v6(false).ok()?;
        let any: std::net::SocketAddr = "[::]:0".parse().unwrap();
        socket.bind(&any.into()).ok()?;
        socket.listen(128).ok()?;
        let listener: TcpListener = socket.into();
        let udp = Socket::new(Domain::IPV6, Type::DGRAM, None).ok()?;
        udp.set_only_v6(false).ok()?;
        if udp.bind(&listener.local_addr().unwrap().into()).is_ok() {
            return Some(listener);
        }
    }
    None
}

/// A dual-stack socket passed as `https` (the shipped kiln-https.socket)
/// gets a dual-stack UDP twin: HTTP/3 is answered on its port over IPv4
/// and IPv6 alike, which `Alt-Svc` advertises over TLS on both; from the
/// address each client wrote to (127.0.0.2's answer would otherwise
/// leave from 127.0.0.1, and be dropped).
#[test]
fn a_dual_stack_https_socket_serves_http3_over_ipv4_and_ipv6() {
    if !h3client::available() {
        return;
    }
    let Some(listener) = dual_stack_listener() else {
        eprintln!("no IPv6 loopback (or no dual-stack socket) on this machine: skipped");
        return;
    };
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let _server = Server::launch(
        &[
            pack.to_str().unwrap(),
            "--tls-self-signed",
            "--threads",
            "2",
        ],
        Launch {
            listen: Vec::new(),
            activate: vec![(listener, "https")],
            ..Launch::default()
        },
    );
    let hello_hex: String = HELLO.iter().map(|b| format!("{b:02x}")).collect();
    for host in ["127.0.0.1", "127.0.0.2", "::1"] {
        let answer = &h3client::run(port, &["--host", host, "get", "/hello.txt"])[0];
        assert_eq!(answer["status"], 200, "HTTP/3 over {host}: {answer}");
        assert_eq!(answer["body"], hello_hex.as_str(), "{host}: {answer}");
        let tcp = TcpStream::connect((host, port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut s = tls_client(tcp, "localhost", insecure_client_config(&[b"http/1.1"]));
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let over_tcp = read_response(&mut s, false).unwrap();
        // The head masks the value (it names the port); HTTP/3's answer,
        // from the same prepared fields, shows it.
        assert!(
            over_tcp.header("alt-svc").is_some(),
            "TLS over {host}: {}",
            over_tcp.head
        );
        let alt_svc = ["alt-svc".to_string(), format!("h3=\":{port}\"; ma=86400")];
        let headers = answer["headers"].as_array().unwrap();
        assert!(
            headers.iter().any(|h| h == &serde_json::json!(alt_svc)),
            "{answer}"
        );
    }
}

#[test]
fn a_passed_descriptor_that_is_no_listener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    // Bound, not listening.
    let not_listening: TcpListener = socket.into();
    let mut command = std::process::Command::new("sh");
    command
        .args([
            "-c",
            "LISTEN_PID=$$ exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_kiln"),
        ])
        .args(["serve", pack.to_str().unwrap()])
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "http");
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = not_listening.as_raw_fd();
        // SAFETY: fcntl and dup2 are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                // Out of the way first: the socket may be descriptor 3
                // already, and close on exec.
                let high = libc::fcntl(fd, libc::F_DUPFD, 100);
                if high < 0 || libc::dup2(high, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
    let out = command.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LISTEN_FDS: descriptor 3 (http) is not listening"),
        "{stderr}"
    );
}

/// Receives the next notification (bounded).
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 1024];
    let n = socket.recv(&mut buf).expect("a notification in time");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn notifications_follow_the_servers_life(notify_socket: String, manager: UnixDatagram) {
    manager
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut server = Server::launch(
        &[pack.to_str().unwrap()],
        Launch {
            env: vec![("NOTIFY_SOCKET", notify_socket)],
            ..Launch::default()
        },
    );
    let ready = next(&manager);
    assert!(ready.starts_with("READY=1\nSTATUS=serving "), "{ready}");
    assert!(
        ready.contains(&format!("\nMAINPID={}\n", server.child.id())),
        "{ready}"
    );
    server.signal(libc::SIGHUP);
    let reloading = next(&manager);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert!(next(&manager).starts_with("READY=1\n"));
    server.signal(libc::SIGTERM);
    assert_eq!(next(&manager), "STOPPING=1\n");
    let status = server.wait_exit(Duration::from_secs(20)).expect("exit");
    assert!(status.success(), "{status}");
}

#[test]
fn readiness_is_notified_on_a_socket_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let manager = UnixDatagram::bind(&path).unwrap();
    notifications_follow_the_servers_life(path.to_str().unwrap().to_string(), manager);
}

#[test]
fn readiness_is_notified_on_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("kiln-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let manager = UnixDatagram::bind_addr(&addr).unwrap();
    notifications_follow_the_servers_life(format!("@{name}"), manager);
}
