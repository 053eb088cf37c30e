//! HTTP/1 behind a TLS session, driven through the same protocol stack
//! (`stack::Protocols`, as `net::Stack`) the event loop drives, with the
//! example-site pack behind it. Two kinds of connection, chosen by the
//! first byte of the input:
//!
//! - **raw**: the rest of the input is what a client sent on a TLS
//!   listener (a broken ClientHello, records of any kind): the stack must
//!   never panic, and must answer with an alert or nothing and close.
//! - **through a client**: a real rustls client completes the handshake
//!   (resuming after the first input, as browsers do), then sends the rest
//!   of the input as its plaintext, in records cut at places drawn from a
//!   hash of the input and delivered to the server in reads cut elsewhere.
//!   Everything the server sends must be valid TLS the client decrypts,
//!   every plaintext byte must be HTTP/1 responses, and the stack must
//!   keep its promises (`more` means output comes without input).

#![no_main]

use std::cell::RefCell;
use std::io::{Read, Write};
use std::sync::Arc;

use kiln::serve::net::conn::Expiry;
use kiln::serve::net::{Output, Seg, Stack, Step};
use kiln::serve::server_headers::ServerHeaders;
use kiln::serve::stack::{self, CurrentSites, Protocols, StackConfig};
use kiln::serve::tls::{self, certs};
use libfuzzer_sys::fuzz_target;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};

mod example_site;
mod read_sizes;
use example_site::{metrics, site};
use read_sizes::read_sizes;

/// At most this many turns of the stack per input: every turn consumes
/// input or sends output, so a connection that goes on past it is a stack
/// that spins.
const MAX_TURNS: usize = 100_000;

struct Fixture {
    protocols: Protocols,
    client: Arc<ClientConfig>,
    out: Output,
    /// What the loop read, which the stack decrypts in place.
    read: Vec<u8>,
}

thread_local! {
    static FIXTURE: RefCell<Fixture> = RefCell::new(fixture());
}

fn fixture() -> Fixture {
    let source = certs::Source::SelfSigned(vec!["localhost".into()]);
    let resolver = certs::load(&source, 1_700_000_000).expect("self-signed certificate");
    let mut roots = RootCertStore::empty();
    roots
        .add(certs::first_certificate(&resolver).clone())
        .expect("the self-signed certificate as a root");
    let server = tls::server_config(std::sync::Arc::new(resolver), &[b"http/1.1"])
        .expect("TLS configuration");
    let client = ClientConfig::builder_with_provider(Arc::new(tls::provider()))
        .with_safe_default_protocol_versions()
        .expect("client versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let config = StackConfig {
        server_headers: ServerHeaders::new(true, false),
        server_headers_tls: ServerHeaders::new(true, true),
        access_log: None,
        access_log_format: Default::default(),
        https_redirect: None,
        metrics: Arc::clone(metrics()),
    };
    let current = Arc::new(CurrentSites::new(Arc::clone(site()), Some(server)));
    let mut protocols = Protocols::new(current, Arc::new(config), u64::MAX, 0);
    protocols.begin_turn(1_700_000_000, false);
    Fixture {
        protocols,
        client: Arc::new(client),
        out: Output::new(64 * 1024, u64::MAX),
        read: Vec::with_capacity(64 * 1024),
    }
}

/// The bytes `out` stands for, as the socket would get them.
fn wire(out: &Output, mapping: &[u8], into: &mut Vec<u8>) {
    for seg in &out.segs {
        match *seg {
            Seg::Own { start, end } => into.extend_from_slice(&out.bytes[start..end]),
            Seg::Mapped { off, len, .. } => into.extend_from_slice(&mapping[off..off + len]),
            Seg::File { .. } => panic!("sendfile is off in this fixture"),
            Seg::Checked { at, .. } => into.push(out.bytes[at]),
        }
    }
}

/// One connection: what the server said so far, and whether it is over.
struct Server<'f> {
    fixture: &'f mut Fixture,
    session: stack::Session,
    closed: bool,
    turns: usize,
}

impl<'f> Server<'f> {
    /// A new connection on a TLS listener.
    fn open(fixture: &'f mut Fixture) -> Server<'f> {
        let session = fixture.protocols.open(stack::TLS, None);
        Server {
            fixture,
            session,
            closed: false,
            turns: 0,
        }
    }

    /// Gives the stack `bytes` and appends everything it answers (with
    /// every `resume` it asks for) to `sent`.
    fn input(&mut self, bytes: &[u8], sent: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        let Fixture {
            protocols,
            out,
            read,
            ..
        } = &mut *self.fixture;
        out.clear();
        read.clear();
        read.extend_from_slice(bytes);
        let mut step = protocols.input(&mut self.session, read, out);
        self.take(step, sent);
        while step.more() && !self.closed {
            let Fixture { protocols, out, .. } = &mut *self.fixture;
            out.clear();
            step = protocols.resume(&mut self.session, out);
            self.take(step, sent);
        }
    }

    fn take(&mut self, step: Step, sent: &mut Vec<u8>) {
        self.turns += 1;
        assert!(self.turns < MAX_TURNS, "the stack keeps asking to resume");
        let Fixture { protocols, out, .. } = &*self.fixture;
        wire(out, protocols.backing().bytes(0), sent);
        if step.closes() {
            self.closed = true;
        }
    }
}

/// The rest of the input straight onto a TLS listener.
fn raw(fixture: &mut Fixture, data: &[u8]) {
    let mut server = Server::open(fixture);
    let mut sent = Vec::new();
    let mut next = read_sizes(data, 700);
    let mut unread = data;
    while !unread.is_empty() && !server.closed {
        let (read, rest) = unread.split_at(next().min(unread.len()));
        unread = rest;
        server.input(read, &mut sent);
    }
    if !server.closed {
        let Fixture { protocols, out, .. } = &mut *server.fixture;
        out.clear();
        protocols.expire(&mut server.session, Expiry::Stalled, out);
    }
}

/// Moves what `client` has to send to the server, in reads of `next()`
/// bytes; returns what the server sent back.
fn client_to_server(
    client: &mut ClientConnection,
    server: &mut Server<'_>,
    next: &mut impl FnMut() -> usize,
) -> Vec<u8> {
    let mut records = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut records).expect("writing to a Vec");
    }
    let mut sent = Vec::new();
    let mut unread = &records[..];
    while !unread.is_empty() {
        let (read, rest) = unread.split_at(next().min(unread.len()));
        unread = rest;
        server.input(read, &mut sent);
    }
    sent
}

/// Gives the client what the server sent; it must be valid TLS. Returns
/// the plaintext it carried.
fn server_to_client(client: &mut ClientConnection, sent: &[u8], plain: &mut Vec<u8>) {
    let mut unread = sent;
    while !unread.is_empty() {
        client.read_tls(&mut unread).expect("reading from a slice");
        let state = client
            .process_new_packets()
            .unwrap_or_else(|e| panic!("the server sent TLS the client refuses: {e}"));
        let mut buf = vec![0; state.plaintext_bytes_to_read()];
        client.reader().read_exact(&mut buf).expect("plaintext");
        plain.extend_from_slice(&buf);
    }
}

/// The rest of the input as a client's plaintext over a real session.
fn through_client(fixture: &mut Fixture, data: &[u8]) {
    let name = ServerName::try_from("localhost").expect("a DNS name");
    let mut client =
        ClientConnection::new(Arc::clone(&fixture.client), name).expect("client session");
    let mut server = Server::open(fixture);
    let mut next = read_sizes(data, 700);
    let mut plain = Vec::new();
    while client.is_handshaking() {
        let sent = client_to_server(&mut client, &mut server, &mut next);
        assert!(!server.closed, "a valid handshake was refused");
        server_to_client(&mut client, &sent, &mut plain);
    }
    let mut unread = data;
    while !unread.is_empty() && !server.closed {
        let (piece, rest) = unread.split_at(next().min(unread.len()));
        unread = rest;
        client
            .writer()
            .write_all(piece)
            .expect("plaintext into the client");
        let sent = client_to_server(&mut client, &mut server, &mut next);
        server_to_client(&mut client, &sent, &mut plain);
    }
    if !server.closed {
        let Fixture { protocols, out, .. } = &mut *server.fixture;
        out.clear();
        protocols.expire(&mut server.session, Expiry::Idle, out);
        let mut sent = Vec::new();
        wire(out, protocols.backing().bytes(0), &mut sent);
        server_to_client(&mut client, &sent, &mut plain);
    }
    assert!(
        plain.is_empty() || plain.starts_with(b"HTTP/1.1 "),
        "plaintext that is not an HTTP/1 response"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    FIXTURE.with_borrow_mut(|fixture| {
        if mode & 1 == 0 {
            raw(fixture, data);
        } else {
            through_client(fixture, data);
        }
    });
});
