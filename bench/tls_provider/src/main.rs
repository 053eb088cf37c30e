//! aws-lc-rs against ring as the crypto provider of kiln's TLS server.
//!
//! A rustls client and server talk through byte buffers in this process (no
//! sockets, no kernel), and only the time spent inside the server's calls is
//! charged to the server: that is the figure kiln's event loops pay per
//! connection. The client always uses aws-lc-rs, so the only thing that
//! changes between the two columns is the server's provider. README.md has
//! the command and what each figure means.

use std::io::{ErrorKind, Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::{
    ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls13ClientSessionValue,
};
use rustls::crypto::{CryptoProvider, aws_lc_rs, ring};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache};
use rustls::{
    ClientConfig, ClientConnection, HandshakeKind, NamedGroup, ProtocolVersion, RootCertStore,
    ServerConfig, ServerConnection, SupportedCipherSuite, version,
};

/// A full TLS record of application data: what a large body is cut into.
const RECORD: usize = 16 * 1024;
/// Records the client encrypts before the server decrypts them, so that
/// the server sees a stream of back-to-back records as from a socket read.
const DECRYPT_BATCH: usize = 64;

#[derive(Clone, Copy, PartialEq)]
enum Provider {
    AwsLcRs,
    Ring,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::AwsLcRs => "aws-lc-rs",
            Provider::Ring => "ring",
        }
    }

    /// kiln's provider (`src/serve/tls/mod.rs`) on either backend: the same
    /// suites and groups in the same order, so negotiation is identical.
    fn kiln_provider(self) -> CryptoProvider {
        macro_rules! kiln_provider {
            ($backend:ident) => {
                CryptoProvider {
                    cipher_suites: vec![
                        $backend::cipher_suite::TLS13_AES_128_GCM_SHA256,
                        $backend::cipher_suite::TLS13_AES_256_GCM_SHA384,
                        $backend::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
                        $backend::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                        $backend::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                        $backend::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                        $backend::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                        $backend::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                        $backend::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                    ],
                    kx_groups: vec![$backend::kx_group::X25519, $backend::kx_group::SECP256R1],
                    ..$backend::default_provider()
                }
            };
        }
        match self {
            Provider::AwsLcRs => kiln_provider!(aws_lc_rs),
            Provider::Ring => kiln_provider!(ring),
        }
    }

    /// The ticketer comes with the provider too, and the two differ in kind
    /// (aws-lc-rs: AES-256-CBC + HMAC-SHA256; ring: ChaCha20-Poly1305), so
    /// it is part of what is compared.
    fn ticketer(self) -> Arc<dyn ProducesTickets> {
        match self {
            Provider::AwsLcRs => aws_lc_rs::Ticketer::new(),
            Provider::Ring => ring::Ticketer::new(),
        }
        .expect("session ticketer")
    }

    /// The same settings as kiln's `server_config`, minus the SNI resolver
    /// (one certificate here; choosing it costs nothing either way).
    fn server_config(self, identity: &Identity) -> Arc<ServerConfig> {
        let mut config = ServerConfig::builder_with_provider(Arc::new(self.kiln_provider()))
            .with_protocol_versions(&[&version::TLS13, &version::TLS12])
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![identity.cert.clone()], identity.key.clone_key())
            .expect("certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.ticketer = self.ticketer();
        config.session_storage = ServerSessionMemoryCache::new(4096);
        config.send_tls13_tickets = 1;
        config.max_early_data_size = 0;
        Arc::new(config)
    }
}

/// The server's certificate and key: ECDSA P-256, as kiln's benchmark uses.
struct Identity {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    fn generate() -> Identity {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key");
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let cert = params.self_signed(&key).expect("self-signed certificate");
        Identity {
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        }
    }
}

/// A client session store that keeps nothing, while the client still asks
/// for tickets: every handshake is a full one, yet the server issues a
/// ticket on each as it does for a browser's first visit.
#[derive(Debug)]
struct Forgetful;

impl ClientSessionStore for Forgetful {
    fn set_kx_hint(&self, _: ServerName<'static>, _: NamedGroup) {}
    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        None
    }
    fn set_tls12_session(&self, _: ServerName<'static>, _: Tls12ClientSessionValue) {}
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        None
    }
    fn remove_tls12_session(&self, _: &ServerName<'_>) {}
    fn insert_tls13_ticket(&self, _: ServerName<'static>, _: Tls13ClientSessionValue) {}
    fn take_tls13_ticket(&self, _: &ServerName<'_>) -> Option<Tls13ClientSessionValue> {
        None
    }
}

/// The client: always aws-lc-rs, offering only X25519 (no post-quantum
/// share to build) and only `suite`, so every handshake lands where asked.
fn client_config(
    identity: &Identity,
    tls12: bool,
    suite: SupportedCipherSuite,
    resumption: Resumption,
) -> Arc<ClientConfig> {
    let provider = CryptoProvider {
        cipher_suites: vec![suite],
        kx_groups: vec![aws_lc_rs::kx_group::X25519],
        ..aws_lc_rs::default_provider()
    };
    let mut roots = RootCertStore::empty();
    roots.add(identity.cert.clone()).expect("trust anchor");
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
        &[&version::TLS12]
    } else {
        &[&version::TLS13]
    };
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = resumption;
    Arc::new(config)
}

/// Time spent inside the server's calls.
#[derive(Default)]
struct ServerClock(Duration);

impl ServerClock {
    fn time<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = work();
        self.0 += start.elapsed();
        out
    }
}

/// Moves what the client has queued into the server; returns the bytes moved.
fn client_to_server(
    client: &mut ClientConnection,
    server: &mut ServerConnection,
    wire: &mut Vec<u8>,
    clock: &mut ServerClock,
) -> usize {
    wire.clear();
    while client.wants_write() {
        client.write_tls(wire).expect("client write_tls");
    }
    let mut rest = &wire[..];
    clock.time(|| {
        while !rest.is_empty() {
            server.read_tls(&mut rest).expect("server read_tls");
            server
                .process_new_packets()
                .expect("server process_new_packets");
        }
    });
    wire.len()
}

/// Moves what the server has queued into the client; returns the bytes moved.
fn server_to_client(
    server: &mut ServerConnection,
    client: &mut ClientConnection,
    wire: &mut Vec<u8>,
    clock: &mut ServerClock,
) -> usize {
    wire.clear();
    clock.time(|| {
        while server.wants_write() {
            server.write_tls(wire).expect("server write_tls");
        }
    });
    let mut rest = &wire[..];
    while !rest.is_empty() {
        client.read_tls(&mut rest).expect("client read_tls");
        client
            .process_new_packets()
            .expect("client process_new_packets");
    }
    wire.len()
}

/// One handshake, run until neither side has anything left to say, so the
/// server's ticket is written and read as part of it.
fn handshake(
    server_config: &Arc<ServerConfig>,
    client_config: &Arc<ClientConfig>,
    wire: &mut Vec<u8>,
    clock: &mut ServerClock,
) -> (ClientConnection, ServerConnection) {
    // Setting up the connection's state is the server's work too.
    let mut server = clock.time(|| ServerConnection::new(server_config.clone()).expect("server"));
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(client_config.clone(), name).expect("client");
    loop {
        let moved = client_to_server(&mut client, &mut server, wire, clock)
            + server_to_client(&mut server, &mut client, wire, clock);
        if moved == 0 && !client.is_handshaking() && !server.is_handshaking() {
            return (client, server);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Aead {
    Aes128Gcm,
    ChaCha20Poly1305,
}

impl Aead {
    /// The client's (aws-lc-rs) TLS 1.3 suite; the server then picks its own
    /// provider's implementation of the same suite.
    fn suite(self) -> SupportedCipherSuite {
        match self {
            Aead::Aes128Gcm => aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256,
            Aead::ChaCha20Poly1305 => aws_lc_rs::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Figure {
    Full13,
    Resumed13,
    Full12,
    Encrypt(Aead),
    Decrypt(Aead),
}

impl Figure {
    const ALL: [Figure; 7] = [
        Figure::Full13,
        Figure::Resumed13,
        Figure::Full12,
        Figure::Encrypt(Aead::Aes128Gcm),
        Figure::Decrypt(Aead::Aes128Gcm),
        Figure::Encrypt(Aead::ChaCha20Poly1305),
        Figure::Decrypt(Aead::ChaCha20Poly1305),
    ];

    fn label(self) -> &'static str {
        match self {
            Figure::Full13 => "TLS 1.3 full handshake",
            Figure::Resumed13 => "TLS 1.3 resumed (ticket)",
            Figure::Full12 => "TLS 1.2 full ECDHE-ECDSA-AES128-GCM",
            Figure::Encrypt(Aead::Aes128Gcm) => "encrypt AES-128-GCM 16 KiB",
            Figure::Decrypt(Aead::Aes128Gcm) => "decrypt AES-128-GCM 16 KiB",
            Figure::Encrypt(Aead::ChaCha20Poly1305) => "encrypt ChaCha20-Poly1305 16 KiB",
            Figure::Decrypt(Aead::ChaCha20Poly1305) => "decrypt ChaCha20-Poly1305 16 KiB",
        }
    }

    fn is_handshake(self) -> bool {
        matches!(self, Figure::Full13 | Figure::Resumed13 | Figure::Full12)
    }
}

/// What one timed run did.
struct Sample {
    /// Handshakes, or plaintext bytes for the bulk figures.
    work: u64,
    /// Inside the server's calls.
    server: Duration,
    /// The whole run, client included.
    wall: Duration,
}

impl Sample {
    /// Handshakes per server-second, or MB (10^6 bytes) per server-second.
    fn server_rate(&self, figure: Figure) -> f64 {
        let per_second = self.work as f64 / self.server.as_secs_f64();
        if figure.is_handshake() {
            per_second
        } else {
            per_second / 1e6
        }
    }

    /// Handshakes per second of the whole pair (client + server, one core).
    fn wall_rate(&self) -> f64 {
        self.work as f64 / self.wall.as_secs_f64()
    }
}

fn measure(
    figure: Figure,
    server_config: &Arc<ServerConfig>,
    identity: &Identity,
    length: Duration,
) -> Sample {
    let mut wire = Vec::with_capacity(DECRYPT_BATCH * (RECORD + 64));
    let mut clock = ServerClock::default();
    let mut work = 0u64;
    let aes12 = aws_lc_rs::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    let aes13 = Aead::Aes128Gcm.suite();
    let start;
    match figure {
        Figure::Full13 | Figure::Full12 => {
            let tls12 = figure == Figure::Full12;
            let suite = if tls12 { aes12 } else { aes13 };
            let client = client_config(
                identity,
                tls12,
                suite,
                Resumption::store(Arc::new(Forgetful)),
            );
            start = Instant::now();
            while start.elapsed() < length {
                let (_client, server) = handshake(server_config, &client, &mut wire, &mut clock);
                check_handshake(&server, tls12, HandshakeKind::Full);
                clock.time(|| drop(server));
                work += 1;
            }
        }
        Figure::Resumed13 => {
            // A fresh store per run: a ticket from the other provider's
            // ticketer would not decrypt and would fall back to a full handshake.
            let client = client_config(identity, false, aes13, Resumption::in_memory_sessions(64));
            let mut priming = ServerClock::default();
            handshake(server_config, &client, &mut wire, &mut priming);
            start = Instant::now();
            while start.elapsed() < length {
                // Each resumption spends one ticket and the server issues one.
                let (_client, server) = handshake(server_config, &client, &mut wire, &mut clock);
                check_handshake(&server, false, HandshakeKind::Resumed);
                clock.time(|| drop(server));
                work += 1;
            }
        }
        Figure::Encrypt(aead) => {
            let client = client_config(identity, false, aead.suite(), Resumption::disabled());
            let (mut client, mut server) = handshake(
                server_config,
                &client,
                &mut wire,
                &mut ServerClock::default(),
            );
            check_suite(&server, aead);
            // kiln lifts the limit too and bounds what it queues itself.
            server.set_buffer_limit(None);
            let plain = vec![0x5a; RECORD];
            check_one_record(&mut server, &mut client, &plain, &mut wire);
            start = Instant::now();
            while start.elapsed() < length {
                wire.clear();
                clock.time(|| {
                    server.writer().write_all(&plain).expect("server write");
                    while server.wants_write() {
                        server.write_tls(&mut wire).expect("server write_tls");
                    }
                });
                // The client has no part in this figure: the records are dropped.
                work += RECORD as u64;
            }
        }
        Figure::Decrypt(aead) => {
            let client = client_config(identity, false, aead.suite(), Resumption::disabled());
            let (mut client, mut server) = handshake(
                server_config,
                &client,
                &mut wire,
                &mut ServerClock::default(),
            );
            check_suite(&server, aead);
            client.set_buffer_limit(None);
            let plain = vec![0xa5; RECORD];
            let mut sink = vec![0u8; RECORD];
            start = Instant::now();
            while start.elapsed() < length {
                wire.clear();
                for _ in 0..DECRYPT_BATCH {
                    client.writer().write_all(&plain).expect("client write");
                }
                while client.wants_write() {
                    client.write_tls(&mut wire).expect("client write_tls");
                }
                let mut rest = &wire[..];
                // Reading the plaintext out belongs to the server's work: kiln
                // copies it into its request buffer the same way.
                let got = clock.time(|| {
                    let mut got = 0;
                    while !rest.is_empty() {
                        server.read_tls(&mut rest).expect("server read_tls");
                        server
                            .process_new_packets()
                            .expect("server process_new_packets");
                        loop {
                            match server.reader().read(&mut sink) {
                                Ok(0) => break,
                                Ok(n) => got += n,
                                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                                Err(e) => panic!("server read: {e}"),
                            }
                        }
                    }
                    got
                });
                assert_eq!(got, DECRYPT_BATCH * RECORD, "server lost plaintext");
                work += got as u64;
            }
        }
    }
    Sample {
        work,
        server: clock.0,
        wall: start.elapsed(),
    }
}

/// A wrong negotiation would silently measure something else.
fn check_handshake(server: &ServerConnection, tls12: bool, kind: HandshakeKind) {
    let expected = if tls12 {
        ProtocolVersion::TLSv1_2
    } else {
        ProtocolVersion::TLSv1_3
    };
    assert_eq!(
        server.protocol_version(),
        Some(expected),
        "protocol version"
    );
    assert_eq!(server.handshake_kind(), Some(kind), "handshake kind");
    let group = server
        .negotiated_key_exchange_group()
        .expect("key exchange")
        .name();
    assert_eq!(group, NamedGroup::X25519, "key exchange group");
}

fn check_suite(server: &ServerConnection, aead: Aead) {
    let suite = server.negotiated_cipher_suite().expect("suite").suite();
    assert_eq!(suite, aead.suite().suite(), "cipher suite");
}

/// One record through to the client before the timed loop drops them: the
/// bytes measured are real, full-size, decryptable records.
fn check_one_record(
    server: &mut ServerConnection,
    client: &mut ClientConnection,
    plain: &[u8],
    wire: &mut Vec<u8>,
) {
    server.writer().write_all(plain).expect("server write");
    let sent = server_to_client(server, client, wire, &mut ServerClock::default());
    // Header, content type byte, tag: one record, not a split.
    assert_eq!(sent, plain.len() + 5 + 1 + 16, "one full record");
    let mut got = vec![0u8; plain.len()];
    client.reader().read_exact(&mut got).expect("client read");
    assert_eq!(got, plain, "record round trip");
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

struct Options {
    rounds: usize,
    seconds: f64,
}

fn options() -> Options {
    let mut options = Options {
        rounds: 5,
        seconds: 2.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--rounds" => options.rounds = value().parse().unwrap_or_else(|_| usage("--rounds N")),
            "--seconds" => {
                options.seconds = value().parse().unwrap_or_else(|_| usage("--seconds S"))
            }
            _ => usage(&format!("unknown argument {arg}")),
        }
    }
    if options.rounds == 0 || options.seconds <= 0.0 {
        usage("rounds and seconds must be positive");
    }
    options
}

fn usage(problem: &str) -> ! {
    eprintln!("tls_provider: {problem}\nusage: tls_provider [--rounds N] [--seconds S]");
    std::process::exit(2);
}

fn main() {
    let options = options();
    let identity = Identity::generate();
    let providers = [Provider::AwsLcRs, Provider::Ring];
    let configs = providers.map(|p| p.server_config(&identity));
    let length = Duration::from_secs_f64(options.seconds);

    let cpus = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .map(String::from)
        })
        .map(|l| l.split_whitespace().last().unwrap_or("?").to_string())
        .unwrap_or_else(|| "?".into());
    println!(
        "server provider: aws-lc-rs vs ring; client: always aws-lc-rs (only the server's provider changes)"
    );
    println!(
        "server certificate: ECDSA P-256; key exchange: X25519; kiln's suites, groups and ticket settings"
    );
    println!(
        "{} rounds x {} s per figure and provider, interleaved; CPUs allowed: {cpus}",
        options.rounds, options.seconds
    );
    println!(
        "rates are per second of time inside the server's calls; medians over rounds (min-max)"
    );
    println!("aws/ring: ratio of the medians; paired: median of the per-round ratios (min-max)\n");

    // A short unrecorded pass: page faults, lazy tables and CPU frequency
    // settle before anything counts.
    for figure in Figure::ALL {
        for config in &configs {
            measure(figure, config, &identity, Duration::from_millis(200));
        }
    }

    // samples[figure][provider] = one Sample per round.
    let mut samples: Vec<[Vec<Sample>; 2]> = Figure::ALL.iter().map(|_| [vec![], vec![]]).collect();
    for round in 0..options.rounds {
        for (f, figure) in Figure::ALL.iter().enumerate() {
            // Alternate who goes first so a drift within a round (a neighbour's
            // load, heat) does not always favour the same provider.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for p in order {
                let sample = measure(*figure, &configs[p], &identity, length);
                samples[f][p].push(sample);
            }
        }
        eprintln!("round {}/{} done", round + 1, options.rounds);
    }

    println!(
        "{:<36} {:<12} {:>20} {:>20} {:>8} {:>17}",
        "figure",
        "unit",
        providers[0].name(),
        providers[1].name(),
        "aws/ring",
        "paired aws/ring"
    );
    for (f, figure) in Figure::ALL.iter().enumerate() {
        let unit = if figure.is_handshake() {
            "hs/server-s"
        } else {
            "MB/server-s"
        };
        let rates = |p: usize, rate: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
            samples[f][p].iter().map(rate).collect()
        };
        let server_rate = |s: &Sample| s.server_rate(*figure);
        print_row(
            figure.label(),
            unit,
            rates(0, &server_rate),
            rates(1, &server_rate),
        );
        if figure.is_handshake() {
            // Whole pair on one core: the client's share is the same in both columns.
            let wall = |s: &Sample| s.wall_rate();
            print_row(
                "  (pair total: client + server)",
                "hs/s",
                rates(0, &wall),
                rates(1, &wall),
            );
        }
    }
}

/// One table row. Besides the ratio of the medians, the median of the
/// per-round ratios: the two providers of a round ran back to back, so that
/// ratio cancels slow drift (a neighbour on the host) that the medians keep.
fn print_row(label: &str, unit: &str, aws: Vec<f64>, ring: Vec<f64>) {
    let mut paired: Vec<f64> = aws.iter().zip(&ring).map(|(a, r)| a / r).collect();
    let cell = |mut values: Vec<f64>| {
        let m = median(&mut values);
        let (lo, hi) = (values[0], values[values.len() - 1]);
        (m, format!("{m:.0} ({lo:.0}-{hi:.0})"))
    };
    let (aws_median, aws_cell) = cell(aws);
    let (ring_median, ring_cell) = cell(ring);
    let paired_median = median(&mut paired);
    let paired_cell = format!(
        "{paired_median:.2} ({:.2}-{:.2})",
        paired[0],
        paired[paired.len() - 1]
    );
    println!(
        "{label:<36} {unit:<12} {aws_cell:>20} {ring_cell:>20} {:>8.2} {paired_cell:>17}",
        aws_median / ring_median
    );
}
