//! Shared by the `serve_*` integration tests: writes packs byte for byte with
//! `PackWriter`, starts the real binary on an ephemeral port, and speaks raw
//! HTTP/1.1 over std sockets.
//!
//! With `KILN_TEST_TLS=1` in the environment, every server also listens
//! with TLS (a self-signed certificate) and `Server::connect` speaks TLS
//! to it: the same tests then run over HTTPS (`./test` runs the serve
//! suite both ways). `KILN_TEST_IO=uring|epoll` picks the connection layer
//! of every server started (`--io`); `./test` runs the suite on both.
//! `pebble.rs`: the test CA of the ACME tests; `browser.rs`: headless
//! Chromium for the tests that load pages in a real browser; `minio.rs`:
//! the S3-compatible store of the store tests; `azurite.rs`: the Azure
//! Blob Storage emulator of `store_azure.rs`; `h3client.rs`: the aioquic-based HTTP/3 client.
#![allow(dead_code)]

pub mod azurite;
pub mod browser;
pub mod h3client;
pub mod minio;
pub mod pebble;

/// A tool `go install` put somewhere: on PATH, else in $GOPATH/bin or
/// ~/go/bin (where `./test` installs Pebble and h2spec).
pub fn go_tool(name: &str) -> Option<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(gopath) = std::env::var_os("GOPATH") {
        dirs.push(std::path::PathBuf::from(gopath).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(std::path::PathBuf::from(home).join("go/bin"));
    }
    dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
}

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln::pack::{
    Encoding, HeadBlock, HeadBlockBuilder, PackWriter, RouteIn, RouteKind, RuleIn, VariantIn,
};

/// The Python the tests' helper scripts run under: `KILN_TEST_PYTHON`
/// (`./test` points it at the virtual environment it makes from
/// tests/requirements.txt), else `python3`.
pub fn python() -> std::ffi::OsString {
    std::env::var_os("KILN_TEST_PYTHON").unwrap_or_else(|| "python3".into())
}

/// Whether this run speaks TLS to the servers it starts.
pub fn tls_mode() -> bool {
    std::env::var_os("KILN_TEST_TLS").is_some_and(|v| v == "1")
}

/// A client connection: plain TCP, or TLS over it in TLS mode.
pub enum Client {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Client {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Client::Plain(s) => s,
            Client::Tls(s) => &s.sock,
        }
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.tcp().set_read_timeout(d)
    }
}

impl Read for Client {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Client::Plain(s) => s.read(buf),
            // Plaintext already decrypted is read first, even when the
            // connection failed since (a write after the server closed);
            // a server that closes without close_notify reads as the end
            // of the stream, as over TCP.
            Client::Tls(s) => loop {
                match s.conn.reader().read(buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
                    other => return other,
                }
                if s.conn.read_tls(&mut s.sock)? == 0 {
                    return Ok(0);
                }
                s.conn
                    .process_new_packets()
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            },
        }
    }
}

impl Write for Client {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Client::Plain(s) => s.write(buf),
            Client::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Client::Plain(s) => s.flush(),
            Client::Tls(s) => s.flush(),
        }
    }
}

/// Accepts the server's self-signed certificate: these tests check HTTP
/// over TLS, not certificate validation (tests/serve_tls.rs does that).
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client configuration that trusts any server certificate, with
/// `alpn` offered.
pub fn insecure_client_config(alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    insecure_client_config_for(rustls::DEFAULT_VERSIONS, alpn)
}

/// `insecure_client_config` offering only `versions`.
pub fn insecure_client_config_for(
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Opens a TLS session over `tcp` for `name`, completing the handshake.
pub fn tls_client(tcp: TcpStream, name: &str, config: Arc<rustls::ClientConfig>) -> Client {
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(config, server_name).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("TLS handshake");
    }
    Client::Tls(Box::new(stream))
}

/// 2023-11-14T22:13:20Z.
pub const LAST_MODIFIED: i64 = 1_700_000_000;
pub const LAST_MODIFIED_HTTP: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

/// A resource's head block as `kiln build` prepares it.
pub fn head(
    etag: &str,
    content_type: &str,
    encoding: Option<&str>,
    vary: bool,
    len: u64,
) -> HeadBlock {
    let mut b = HeadBlockBuilder::new();
    b.line("ETag", etag)
        .line("Last-Modified", LAST_MODIFIED_HTTP)
        .line("Cache-Control", "public, max-age=60");
    if vary {
        b.line("Vary", "Accept-Encoding");
    }
    b.begin_representation().line("Content-Type", content_type);
    if let Some(e) = encoding {
        b.line("Content-Encoding", e);
    }
    b.line("Accept-Ranges", "bytes");
    b.finish(len)
}

/// Adds an identity-only resource under `keys`.
pub fn add_plain(
    w: &mut PackWriter,
    keys: &[(RouteKind, &str)],
    etag: &str,
    ct: &str,
    body: &[u8],
    status: u16,
) {
    let b = w.add_body(body).unwrap();
    let h = head(etag, ct, None, false, b.len);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body: b,
        }])
        .unwrap();
    for (kind, key) in keys {
        w.add_route(RouteIn {
            kind: *kind,
            key: key.as_bytes(),
            status,
            last_modified: LAST_MODIFIED,
            variants: set,
            validators: status == 200 && *kind != RouteKind::NotFound,
        })
        .unwrap();
    }
}

/// The 1 MiB body of `/big.bin` (above the sendfile threshold).
pub fn big_body() -> Vec<u8> {
    (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

pub const HOME: &[u8] = b"<h1>home</h1>\n";
pub const HOME_GZ: &[u8] = b"GZ(home)";
pub const HOME_BR: &[u8] = b"BR(h)";
pub const HELLO: &[u8] = b"Hello World!";

/// The example site (`examples/site`) fired by the kiln binary into
/// `dir/site.pack`: the pages the HTTP/2 and HTTP/3 tests compare with
/// HTTP/1.1.
pub fn example_pack(dir: &Path) -> PathBuf {
    let pack = dir.join("site.pack");
    let status = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", "examples/site", "-o"])
        .arg(&pack)
        .arg("-q")
        .status()
        .expect("kiln build");
    assert!(status.success());
    pack
}

/// The site most tests use.
pub fn sample_pack(dir: &Path) -> PathBuf {
    let path = dir.join("site.pack");
    let mut w = PackWriter::create(&path).unwrap();
    // "/" and "/index.html": identity, gzip and br variants.
    let id = w.add_body(HOME).unwrap();
    let gz = w.add_body(HOME_GZ).unwrap();
    let br = w.add_body(HOME_BR).unwrap();
    let h_id = head("\"home\"", "text/html; charset=utf-8", None, true, id.len);
    let h_gz = head(
        "\"home-gz\"",
        "text/html; charset=utf-8",
        Some("gzip"),
        true,
        gz.len,
    );
    let h_br = head(
        "\"home-br\"",
        "text/html; charset=utf-8",
        Some("br"),
        true,
        br.len,
    );
    let set = w
        .add_variant_set(&[
            VariantIn {
                encoding: Encoding::Identity,
                head: &h_id,
                body: id,
            },
            VariantIn {
                encoding: Encoding::Gzip,
                head: &h_gz,
                body: gz,
            },
            VariantIn {
                encoding: Encoding::Br,
                head: &h_br,
                body: br,
            },
        ])
        .unwrap();
    for key in ["/", "/index.html"] {
        w.add_route(RouteIn {
            kind: RouteKind::Exact,
            key: key.as_bytes(),
            status: 200,
            last_modified: LAST_MODIFIED,
            variants: set,
            validators: true,
        })
        .unwrap();
    }
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/hello.txt")],
        "\"hello\"",
        "text/plain; charset=utf-8",
        HELLO,
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/big.bin")],
        "\"big\"",
        "application/octet-stream",
        &big_body(),
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Wildcard, "/docs/")],
        "\"docs\"",
        "text/plain; charset=utf-8",
        b"docs fallback",
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/forced/a")],
        "\"fa\"",
        "text/plain; charset=utf-8",
        b"shadowed",
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/.well-known/security.txt")],
        "\"sec\"",
        "text/plain; charset=utf-8",
        b"Contact: mailto:x@example.com\n",
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::NotFound, "")],
        "\"nf\"",
        "text/html; charset=utf-8",
        b"custom 404\n",
        404,
    );
    // A directory redirect route: `/dir` → `/dir/`.
    let empty = w.add_body(b"").unwrap();
    let mut rb = HeadBlockBuilder::new();
    rb.line("Location", "/dir/");
    let rh = rb.finish(0);
    let rset = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &rh,
            body: empty,
        }])
        .unwrap();
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: b"/dir",
        status: 301,
        last_modified: LAST_MODIFIED,
        variants: rset,
        validators: false,
    })
    .unwrap();
    for (from, to, status, force) in [
        ("/forced/:x", "/hello.txt", 200, true),
        ("/blog/:year/:slug", "/posts/:slug-:year", 301, false),
        ("/app/*", "/index.html", 200, false),
        ("/gone/*", "/hello.txt", 404, false),
        ("/ext/*", "https://example.com/:splat", 302, false),
    ] {
        w.add_rule(RuleIn {
            from: from.as_bytes(),
            to: to.as_bytes(),
            status,
            force,
        });
    }
    w.finish().unwrap();
    path
}

/// A one-route pack whose `/version.txt` says `version`, for reload tests.
pub fn version_pack(path: &Path, version: &str) {
    let mut w = PackWriter::create(path).unwrap();
    let etag = format!("\"{version}\"");
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/version.txt")],
        &etag,
        "text/plain",
        version.as_bytes(),
        200,
    );
    w.finish().unwrap();
}

/// A running `kiln serve`; killed on drop.
pub struct Server {
    /// The TLS port, in TLS mode.
    pub tls_port: Option<u16>,
    pub child: Child,
    /// The cleartext port (the TLS one for a server without cleartext
    /// listeners).
    pub port: u16,
    /// Everything the server wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    /// Everything the server wrote to stdout (the access log with
    /// `--access-log -`).
    pub stdout: Arc<Mutex<String>>,
    /// The start-up line (on stderr); empty for a server whose stderr
    /// the test does not read.
    pub startup: String,
    /// The server's TMPDIR, where a directory site's preview packs go;
    /// removed with the server.
    pub tmp: tempfile::TempDir,
}

/// How `Server::launch` starts the server.
pub struct Launch {
    /// RLIMIT_NOFILE in the server.
    pub fd_limit: Option<u64>,
    /// RLIMIT_MEMLOCK in the server.
    pub memlock_limit: Option<u64>,
    /// The `--listen` values; the port tests connect to is the first
    /// address's, read from the start-up line.
    pub listen: Vec<String>,
    /// Where the server's stderr goes; `None`: a pipe the test reads
    /// (`Server::stderr_text`). Given, the server cannot tell its port:
    /// unless `activate` names sockets, it listens on one bound by the
    /// launcher and passed as systemd passes it, and the launcher waits
    /// for its READY=1 on `NOTIFY_SOCKET`.
    pub stderr: Option<Stdio>,
    /// Keep reading stdout (`Server::stdout`); `false` closes the pipe's
    /// read end at start, so that writes fail.
    pub drain_stdout: bool,
    /// Start the server where io_uring is refused (`deny_io_uring`).
    pub deny_io_uring: bool,
    /// Start the server where inotify is refused (`deny_inotify`).
    pub deny_inotify: bool,
    /// When the tests run as root, pass `--user root` (unless ARGS name a
    /// user or `--no-sandbox`): the server then still reads the tests'
    /// private folders at reloads. Tests of the switch to another user
    /// turn this off.
    pub stay_root: bool,
    /// Extra environment variables of the server.
    pub env: Vec<(&'static str, String)>,
    /// The server's working directory (default: the test's).
    pub current_dir: Option<PathBuf>,
    /// Listening sockets passed the way systemd passes them: as
    /// descriptors 3, 4, … with `LISTEN_FDS`, `LISTEN_FDNAMES` (these
    /// names) and `LISTEN_PID` (the server's own pid, set by the shell
    /// that execs it).
    pub activate: Vec<(std::net::TcpListener, &'static str)>,
}

/// Makes `command`'s process run where `io_uring_setup` fails with ENOSYS,
/// as on a kernel without io_uring or in a container that forbids it: a
/// seccomp filter installed between fork and exec.
pub fn deny_io_uring(command: &mut Command) {
    deny_syscall(command, libc::SYS_io_uring_setup);
}

/// Makes `command`'s process run where `inotify_init1` fails with ENOSYS,
/// as where inotify cannot be had: the server has no watch, and sees only
/// what `--poll` finds, as on a network filesystem whose other clients'
/// writes inotify never reports.
pub fn deny_inotify(command: &mut Command) {
    deny_syscall(command, libc::SYS_inotify_init1);
}

/// Makes system call `nr` fail with ENOSYS in `command`'s process: a
/// seccomp filter installed between fork and exec.
fn deny_syscall(command: &mut Command, nr: libc::c_long) {
    use std::os::unix::process::CommandExt;
    const SECCOMP_DATA_NR: u32 = 0;
    let filter = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: SECCOMP_DATA_NR,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    // SAFETY: prctl is async-signal-safe; `filter` is copied into the
    // child's memory by fork and outlives the calls.
    unsafe {
        command.pre_exec(move || {
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            fd_limit: None,
            memlock_limit: None,
            listen: vec!["127.0.0.1:0".to_owned()],
            stderr: None,
            drain_stdout: true,
            deny_io_uring: false,
            deny_inotify: false,
            stay_root: true,
            env: Vec::new(),
            current_dir: None,
            activate: Vec::new(),
        }
    }
}

/// Makes the sockets of `listeners` descriptors 3, 4, … of `command`'s
/// process (inherited across exec) and names them in `LISTEN_FDS` and
/// `LISTEN_FDNAMES`, as systemd does.
fn pass_listeners(command: &mut Command, listeners: &[(std::net::TcpListener, &'static str)]) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fds: Vec<i32> = listeners.iter().map(|(l, _)| l.as_raw_fd()).collect();
    let names: Vec<&str> = listeners.iter().map(|(_, n)| *n).collect();
    command
        .env("LISTEN_FDS", fds.len().to_string())
        .env("LISTEN_FDNAMES", names.join(":"));
    // SAFETY: fcntl and dup2 are async-signal-safe; `fds` is copied into
    // the child by fork.
    unsafe {
        command.pre_exec(move || {
            // Out of the way first: a source may sit where another goes.
            let mut high = Vec::with_capacity(fds.len());
            for &fd in &fds {
                let moved = libc::fcntl(fd, libc::F_DUPFD, 100);
                if moved < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high.push(moved);
            }
            for (i, &fd) in high.iter().enumerate() {
                // dup2 leaves the new descriptor open across exec.
                if libc::dup2(fd, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        })
    };
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() == 0 }
}

/// Where every write fails: a pipe whose read end is closed (EPIPE) and
/// `/dev/full` (ENOSPC); named for messages.
pub fn unwritable_outputs() -> Vec<(&'static str, Stdio)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills two descriptors, which we own from here.
    assert_eq!(
        unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: both descriptors are fresh and ours.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read_end);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    vec![
        ("a pipe closed at the other end", Stdio::from(write_end)),
        ("/dev/full", Stdio::from(full)),
    ]
}

impl Server {
    /// The port of the metrics listener (`--metrics 127.0.0.1:0`), from
    /// the start-up line.
    pub fn metrics_port(&self) -> u16 {
        self.startup
            .split("metrics on 127.0.0.1:")
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metrics address in {:?}", self.startup))
    }

    /// `GET /metrics` on the metrics listener: the exposition's text.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.metrics_port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("a response");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_owned()
    }

    /// Starts `kiln serve ARGS --listen 127.0.0.1:0` and waits for its
    /// start-up line.
    pub fn start(args: &[&str]) -> Server {
        Server::launch(args, Launch::default())
    }

    /// `start` with RLIMIT_NOFILE set to `fd_limit` in the server.
    pub fn start_with_fd_limit(args: &[&str], fd_limit: Option<u64>) -> Server {
        Server::launch(
            args,
            Launch {
                fd_limit,
                ..Launch::default()
            },
        )
    }

    /// Starts `kiln serve ARGS` as `launch` says and waits for its start-up
    /// line.
    pub fn launch(args: &[&str], mut launch: Launch) -> Server {
        // A server whose stderr the test does not read cannot tell its
        // port: it gets a socket bound here, as systemd passes one, and
        // says it is ready as it tells systemd (`NOTIFY_SOCKET`).
        let mut readiness = None;
        if launch.stderr.is_some() && launch.activate.is_empty() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            launch.activate.push((listener, "http"));
            launch.listen.clear();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("notify");
            let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
            launch
                .env
                .push(("NOTIFY_SOCKET", path.to_str().unwrap().to_owned()));
            readiness = Some((dir, socket));
        }
        let activated_port = launch
            .activate
            .first()
            .map(|(l, _)| l.local_addr().unwrap().port());
        let mut command = if launch.activate.is_empty() {
            Command::new(env!("CARGO_BIN_EXE_kiln"))
        } else {
            // LISTEN_PID must be the server's pid: the shell sets it to its
            // own and execs the server, which keeps it.
            let mut c = Command::new("sh");
            c.args([
                "-c",
                "LISTEN_PID=$$ exec \"$0\" \"$@\"",
                env!("CARGO_BIN_EXE_kiln"),
            ]);
            c
        };
        if !launch.activate.is_empty() {
            pass_listeners(&mut command, &launch.activate);
        }
        let limits = [
            (libc::RLIMIT_NOFILE, launch.fd_limit),
            (libc::RLIMIT_MEMLOCK, launch.memlock_limit),
        ];
        for (resource, limit) in limits {
            let Some(limit) = limit else { continue };
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(resource, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        if launch.deny_io_uring {
            deny_io_uring(&mut command);
        }
        if launch.deny_inotify {
            deny_inotify(&mut command);
        }
        command.arg("serve").args(args);
        if let Some(io) = std::env::var_os("KILN_TEST_IO")
            && !args.contains(&"--io")
        {
            command.arg("--io").arg(io);
        }
        let names_user = args.iter().any(|a| ["--user", "--no-sandbox"].contains(a));
        if launch.stay_root && is_root() && !names_user {
            command.args(["--user", "root"]);
        }
        // Open to every user: a server that switched users creates its
        // preview folder here.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        command.env("TMPDIR", tmp.path()).envs(launch.env);
        if let Some(dir) = &launch.current_dir {
            command.current_dir(dir);
        }
        for value in &launch.listen {
            command.args(["--listen", value]);
        }
        // Tests that set up TLS themselves keep their own listeners.
        if tls_mode() && !args.contains(&"--listen-tls") && launch.activate.is_empty() {
            command.args(["--listen-tls", "127.0.0.1:0", "--tls-self-signed"]);
        }
        let read_stderr = launch.stderr.is_none();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(launch.stderr.unwrap_or_else(Stdio::piped))
            .spawn()
            .expect("start kiln");
        // Stdout holds only the access log (`--access-log -`): drained
        // into `stdout`, or closed at once, so that later writes fail.
        let out_pipe = child.stdout.take().unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        if launch.drain_stdout {
            let out_sink = Arc::clone(&stdout);
            std::thread::spawn(move || {
                for line in BufReader::new(out_pipe).lines().map_while(Result::ok) {
                    let mut s = out_sink.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        } else {
            drop(out_pipe);
        }
        // The start-up line comes on stderr, among the log lines; the
        // thread keeps reading stderr after it.
        let stderr = Arc::new(Mutex::new(String::new()));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        if read_stderr {
            let err_pipe = child.stderr.take().unwrap();
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
                    // A child the server started (`--acme`) writes to the
                    // same stderr, and a line of its may be cut by this one.
                    if let Some(at) = line.find("kiln: serving ") {
                        let _ = started_tx.send(line[at..].to_string());
                    }
                    let mut s = sink.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let startup = match &readiness {
            Some((_, socket)) => {
                socket
                    .set_read_timeout(Some(Duration::from_secs(60)))
                    .unwrap();
                let mut message = [0u8; 4096];
                loop {
                    let n = socket.recv(&mut message).expect("the server's READY=1");
                    if message[..n].starts_with(b"READY=1") {
                        break String::new();
                    }
                }
            }
            None => started_rx.recv().unwrap_or_else(|_| {
                panic!(
                    "kiln exited without its start-up line; stderr: {}",
                    stderr.lock().unwrap()
                )
            }),
        };
        let tls_port = startup
            .split("https://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|p| p.parse().ok());
        // A server with TLS listeners only: `port` is the TLS one.
        let port = startup
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|host_port| host_port.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .or(activated_port)
            .or(tls_port)
            .unwrap_or_else(|| {
                panic!(
                    "no port in start-up line {startup:?}; stderr: {}",
                    stderr.lock().unwrap()
                )
            });
        Server {
            tls_port,
            child,
            port,
            stderr,
            stdout,
            startup,
            tmp,
        }
    }

    /// A connection to the server: TLS in TLS mode (handshake done),
    /// plain TCP otherwise.
    pub fn connect(&self) -> Client {
        match self.tls_port {
            Some(port) => {
                let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                tls_client(s, "localhost", insecure_client_config(&[b"http/1.1"]))
            }
            None => Client::Plain(self.connect_plain()),
        }
    }

    /// A plain TCP connection to the cleartext listener.
    pub fn connect_plain(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The log once it holds every one of `needles`, waiting up to 30 s
    /// (a thread copies the server's stderr, so a line logged before a
    /// response may reach the test after it); fails naming what is missing.
    pub fn wait_for_log(&self, needles: &[&str]) -> String {
        let start = Instant::now();
        loop {
            let log = self.stderr_text();
            let missing: Vec<&str> = needles
                .iter()
                .copied()
                .filter(|n| !log.contains(n))
                .collect();
            if missing.is_empty() {
                return log;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no {missing:?} in the log after 30 s: {log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One request on a fresh connection, reading until the server closes.
    pub fn raw(&self, request: &str) -> String {
        let mut s = self.connect();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// `GET path` with extra header lines, connection closed after.
    pub fn get(&self, path: &str, headers: &str) -> Response {
        self.request("GET", path, headers)
    }

    /// `GET path` of the site `host` (its Host header), connection closed
    /// after.
    pub fn get_host(&self, host: &str, path: &str) -> Response {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let mut s = self.connect();
        s.write_all(raw.as_bytes()).unwrap();
        read_response(&mut s, false).expect("a response")
    }

    /// `method path` with extra header lines, connection closed after; a
    /// HEAD response is read without a body.
    pub fn request(&self, method: &str, path: &str, headers: &str) -> Response {
        let raw =
            format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}Connection: close\r\n\r\n");
        let mut s = self.connect();
        s.write_all(raw.as_bytes()).unwrap();
        read_response(&mut s, method == "HEAD").expect("a response")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// The head with the Date value masked, lines as sent.
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Replaces the Date value with `<date>`, and over TLS the `Alt-Svc`
/// value (it names the port, another per server) with `<alt-svc>`,
/// leaving every other byte as is.
pub fn mask_date(text: &str) -> String {
    let text = mask_value(text, "\r\nDate: ", "<date>");
    mask_value(&text, "\r\nAlt-Svc: ", "<alt-svc>")
}

/// `text` with the value of the first line starting with `field` (its
/// `\r\n` included) replaced with `mask`.
fn mask_value(text: &str, field: &str, mask: &str) -> String {
    match text.find(field) {
        Some(at) => {
            let start = at + field.len();
            let end = text[start..].find("\r\n").map_or(text.len(), |e| start + e);
            format!("{}{mask}{}", &text[..start], &text[end..])
        }
        None => text.to_string(),
    }
}

/// Reads one response from `s`; `head_request` means no body follows.
pub fn read_response(s: &mut impl Read, head_request: bool) -> Option<Response> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            // A signal caught by this process ends a read on a socket with
            // a receive timeout with EINTR even under SA_RESTART
            // (signal(7)); seen under load in `serve_shutdown`.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&head[..head.len() - 4]).into_owned();
    let status = text.get(9..12)?.parse().ok()?;
    let mut resp = Response {
        status,
        head: mask_date(&text),
        body: Vec::new(),
    };
    let len: usize = resp
        .header("Content-Length")
        .map_or(0, |v| v.parse().unwrap());
    if !head_request && status != 304 && status != 204 {
        resp.body = vec![0; len];
        s.read_exact(&mut resp.body).ok()?;
    }
    Some(resp)
}

/// The lines every response carries before its own, with the default
/// security headers.
/// The `Alt-Svc` line of the server's own fields, as `mask_date` leaves
/// it: over TLS, HTTP/3 is offered too; nothing on cleartext.
pub fn alt_svc_line() -> &'static str {
    if tls_mode() {
        "Alt-Svc: <alt-svc>\r\n"
    } else {
        ""
    }
}

pub fn common_lines(status_line: &str, close: bool) -> String {
    let conn = if close { "Connection: close\r\n" } else { "" };
    let alt_svc = alt_svc_line();
    format!(
        "{status_line}\r\nServer: kiln\r\nDate: <date>\r\n{conn}X-Content-Type-Options: nosniff\r\n\
Referrer-Policy: strict-origin-when-cross-origin\r\nX-Frame-Options: SAMEORIGIN\r\n\
X-XSS-Protection: 0\r\nCross-Origin-Opener-Policy: same-origin\r\n{alt_svc}"
    )
}

/// Whether the curl on PATH speaks HTTP/2 (tests that use it skip
/// themselves, saying so, where it does not).
pub fn curl_has_http2() -> bool {
    Command::new("curl")
        .arg("-V")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("HTTP2"))
}

/// Archives the contents of `dir` (not the folder itself) into `archive`
/// with the system's tar; `flags` is tar's first argument (`-cf`, `-czf`).
pub fn tar_contents(archive: &Path, dir: &Path, flags: &str) {
    let status = Command::new("tar")
        .arg(flags)
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar {flags} {}", archive.display());
}

/// Connects to `server` with `config` and gets a page (which also reads
/// the ticket the server sends after the handshake); true when the
/// handshake resumed a session.
pub fn resumed(server: &Server, config: &Arc<rustls::ClientConfig>) -> bool {
    let tcp = TcpStream::connect(("127.0.0.1", server.tls_port.expect("a TLS port"))).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut client = tls_client(tcp, "site.test", Arc::clone(config));
    let Client::Tls(stream) = &client else {
        panic!("not a TLS connection")
    };
    let kind = stream.conn.handshake_kind();
    use std::io::Write as _;
    client
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let response = read_response(&mut client, false).expect("a response");
    assert_eq!(response.body, HELLO);
    kind == Some(rustls::HandshakeKind::Resumed)
}

/// Base64 (RFC 4648, padded) of `bytes`: how Chromium writes SPKI hashes,
/// and Azure's Shared Key its signatures.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}
