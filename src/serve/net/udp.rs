//! UDP for QUIC: the sockets (one per loop thread on each TLS address,
//! `SO_REUSEPORT`, the group steered by connection ID), datagrams received
//! in batches into one reusable arena (`recvmmsg`, GRO), and datagrams to
//! send queued in reused buffers and sent in batches (`sendmmsg`, GSO).
//! Bytes only: what the datagrams mean is the stack's.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use bytes::BytesMut;
use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::{self, DATAGRAM_BATCH, OutgoingDatagram, ReceivedDatagram};

/// Room for one received slot: GRO coalesces up to 64 KiB of one flow.
const SLOT: usize = 64 * 1024;
/// The receive arena: a batch of slots.
const ARENA: usize = SLOT * DATAGRAM_BATCH;

/// Fails if a UDP socket (any process's, `SO_REUSEPORT` or not) holds
/// `addr` already: for a TCP port the kernel chose, whose UDP twin HTTP/3
/// needs too.
pub fn check_free(addr: SocketAddr) -> std::io::Result<()> {
    let probe = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// Binds one thread's UDP socket on `addr`, in the `SO_REUSEPORT` group of
/// the other threads' on the same address. `only_v6` (for an IPv6 `addr`)
/// is the `IPV6_V6ONLY` of its TCP listener, so that a dual-stack listener
/// (`[::]` as systemd's `BindIPv6Only=both` binds it) gets a dual-stack twin
/// and HTTP/3 reaches IPv4 clients too: their addresses then come and go
/// IPv4-mapped (`::ffff:a.b.c.d`), which `sendmmsg` takes back as they
/// came, GSO included. `steer` (given for the first
/// socket of a group, with the group's size): the kernel then hands each
/// datagram to the socket its connection ID names (the first byte of the
/// IDs this server issues is the thread's index), so that a connection
/// whose client moved to another address or port still reaches its
/// thread. Sockets must be bound in thread order: the group numbers them so.
///
/// A socket on a wildcard address (`0.0.0.0`, `[::]`) learns the address
/// each datagram was sent to, and answers from it: on a host with several
/// addresses (IPv6 privacy addresses, a multi-homed server) the route
/// would pick the source otherwise, and a client drops datagrams from an
/// address it did not write to.
pub fn bind(addr: SocketAddr, only_v6: bool, steer: Option<u32>) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(only_v6)?;
    }
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    // Room for bursts while the loop serves other events.
    let _ = socket.set_recv_buffer_size(4 << 20);
    let _ = socket.set_send_buffer_size(4 << 20);
    socket.bind(&addr.into())?;
    let socket: UdpSocket = socket.into();
    if let Err(e) = sys::enable_udp_gro(socket.as_fd()) {
        tracing::debug!("UDP GRO: {e}; datagrams are received one per slot");
    }
    if let Some(sockets) = steer {
        sys::steer_reuseport_by_first_cid_byte(socket.as_fd(), sockets)?;
    }
    // A socket bound to one address sends from it: it needs no packet info.
    if addr.ip().is_unspecified() {
        let ipv4 = !addr.is_ipv6() || !only_v6;
        sys::enable_packet_info(socket.as_fd(), ipv4, addr.is_ipv6())?;
    }
    Ok(socket)
}

/// Received datagrams: one arena of slots, reused while nothing of it is
/// still referenced (a datagram's bytes are handed out as `BytesMut`
/// pieces of it, which QUIC keeps only until the stream data is read).
pub struct Received {
    arena: BytesMut,
    /// The allocation the arena had when it was last zero-filled: another
    /// one (the old one still referenced) is filled once before use.
    filled: *const u8,
    got: [ReceivedDatagram; DATAGRAM_BATCH],
    count: usize,
}

// SAFETY: `filled` is compared, never dereferenced.
unsafe impl Send for Received {}

impl Default for Received {
    fn default() -> Received {
        Received {
            arena: BytesMut::new(),
            filled: std::ptr::null(),
            got: [ReceivedDatagram {
                len: 0,
                peer: (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
                local: None,
                segment: None,
            }; DATAGRAM_BATCH],
            count: 0,
        }
    }
}

impl Received {
    /// Receives one batch from `socket`: how many datagrams (or GRO
    /// trains) arrived, 0 when the socket is empty.
    pub fn receive(&mut self, socket: &UdpSocket) -> std::io::Result<usize> {
        self.arena.clear();
        // Takes the arena's allocation back when no piece of it is held.
        self.arena.reserve(ARENA);
        if self.arena.as_ptr() != self.filled {
            self.arena.resize(ARENA, 0);
            self.filled = self.arena.as_ptr();
            self.arena.clear();
        }
        // SAFETY: the allocation is at least ARENA long and was filled
        // (zeros, then received bytes) since it was made: every byte is
        // initialised.
        unsafe { self.arena.set_len(ARENA) };
        self.count = sys::recv_datagrams(socket.as_fd(), &mut self.arena, SLOT, &mut self.got)?;
        Ok(self.count)
    }

    /// Hands out each datagram of the last batch, GRO trains cut into
    /// their datagrams, as pieces of the arena: (its sender, the address
    /// it was sent to when the socket is on a wildcard one, its bytes).
    pub fn for_each(&mut self, mut f: impl FnMut(SocketAddr, Option<IpAddr>, BytesMut)) {
        for got in &self.got[..self.count] {
            let mut slot = self.arena.split_to(SLOT);
            slot.truncate(got.len);
            let stride = got.segment.unwrap_or(got.len).max(1);
            while !slot.is_empty() {
                let datagram = slot.split_to(stride.min(slot.len()));
                f(got.peer, got.local, datagram);
            }
        }
        self.count = 0;
    }
}

/// The most datagrams one UDP GSO send may carry (the kernel's
/// `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// The most bytes one UDP GSO send may carry: an IPv4 datagram's 65,535
/// less its IP and UDP headers (IPv6 allows 20 more).
const GSO_MAX_BYTES: usize = 65_535 - 20 - 8;

/// How many datagrams of `segment` bytes one send may carry as a GSO train.
pub fn gso_segments(segment: usize) -> usize {
    (GSO_MAX_BYTES / segment.max(1)).clamp(1, GSO_MAX_SEGMENTS)
}

/// Buffers [`Transmits`] keeps for reuse at most: four `sendmmsg`
/// batches, more than a busy loop turn queues. A burst of handshakes
/// queues a flight per client in one turn; keeping every buffer it grew
/// (about 5 KB each) made the burst's high-water mark part of what each
/// idle HTTP/3 connection costs (heap profile in docs/security.md). Past
/// this, a buffer is freed once sent.
const SPARE_MAX: usize = 4 * DATAGRAM_BATCH;

/// Datagrams to send, each in its own buffer (QUIC writes a train of
/// same-sized datagrams into one for GSO); buffers are reused, up to
/// `SPARE_MAX` of them.
#[derive(Default)]
pub struct Transmits {
    queued: Vec<Queued>,
    spare: Vec<Vec<u8>>,
}

struct Queued {
    to: SocketAddr,
    from: Option<IpAddr>,
    bytes: Vec<u8>,
    segment: Option<u16>,
}

impl Transmits {
    /// An empty buffer to write the next datagram (or train) into.
    pub fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Queues `bytes` for `to` (cut into `segment`-byte datagrams) from
    /// the address `from` (the one its datagrams came to, for a socket on
    /// a wildcard address), or takes the buffer back unused when `to` is
    /// `None`.
    pub fn queue(
        &mut self,
        to: Option<SocketAddr>,
        from: Option<IpAddr>,
        bytes: Vec<u8>,
        segment: Option<usize>,
    ) {
        match to {
            Some(to) if !bytes.is_empty() => self.queued.push(Queued {
                to,
                from,
                bytes,
                segment: segment.and_then(|s| u16::try_from(s).ok()),
            }),
            _ => self.keep(bytes),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Sends what is queued, a batch per system call. A datagram the
    /// kernel refuses (its buffer full, a route gone) is dropped: QUIC
    /// treats it as lost and sends again.
    pub fn send(&mut self, socket: &UdpSocket) {
        let mut sent = 0;
        while sent < self.queued.len() {
            let mut batch = [OutgoingDatagram {
                to: self.queued[sent].to,
                from: None,
                bytes: &[],
                segment: None,
            }; DATAGRAM_BATCH];
            let end = (sent + DATAGRAM_BATCH).min(self.queued.len());
            for (slot, q) in batch.iter_mut().zip(&self.queued[sent..end]) {
                *slot = OutgoingDatagram {
                    to: q.to,
                    from: q.from,
                    bytes: &q.bytes,
                    segment: q.segment,
                };
            }
            match sys::send_datagrams(socket.as_fd(), &batch[..end - sent]) {
                Ok(0) | Err(_) => sent += 1,
                Ok(n) => sent += n,
            }
        }
        let mut queued = std::mem::take(&mut self.queued);
        for q in queued.drain(..) {
            self.keep(q.bytes);
        }
        self.queued = queued;
    }

    /// Takes a sent (or unused) buffer back for reuse, or frees it when
    /// `SPARE_MAX` are kept already.
    fn keep(&mut self, mut bytes: Vec<u8>) {
        if self.spare.len() < SPARE_MAX {
            bytes.clear();
            self.spare.push(bytes);
        }
    }
}

/// Batches of datagrams one socket is read for per turn before the other
/// events get theirs; the rest is read at the next turn.
const BATCHES_PER_TURN: usize = 8;

/// One loop thread's UDP sockets and their buffers, as either back end
/// drives them: readiness tells it to `read`, each turn it runs `timers`.
#[derive(Default)]
pub struct DatagramSockets {
    /// By the index the stack knows them by.
    pub sockets: Vec<UdpSocket>,
    received: Received,
    transmits: Transmits,
}

impl DatagramSockets {
    pub fn new(sockets: Vec<UdpSocket>) -> DatagramSockets {
        DatagramSockets {
            sockets,
            ..DatagramSockets::default()
        }
    }

    /// Reads a few batches from socket `i`, hands them to the stack and
    /// sends what it answers. Whether datagrams may be left unread (the
    /// socket was not emptied).
    pub fn read<S: super::Stack>(&mut self, i: usize, stack: &mut S) -> bool {
        let Some(socket) = self.sockets.get(i) else {
            return false;
        };
        for _ in 0..BATCHES_PER_TURN {
            match self.received.receive(socket) {
                Ok(0) => return false,
                Ok(_) => {
                    stack.datagrams(i, &mut self.received, &mut self.transmits);
                    self.transmits.send(socket);
                }
                Err(e) => {
                    tracing::debug!("recvmmsg: {e}");
                    return false;
                }
            }
        }
        true
    }

    /// Runs the stack's datagram timers on every socket and sends what
    /// they produce: the milliseconds until the next one, at most `cap`.
    pub fn timers<S: super::Stack>(&mut self, stack: &mut S, cap: u64) -> u64 {
        let mut wait = cap;
        for (i, socket) in self.sockets.iter().enumerate() {
            if let Some(next) = stack.datagram_turn(i, &mut self.transmits) {
                // Rounded up: waking early would find nothing due.
                wait = wait.min(next.as_micros().div_ceil(1000) as u64);
            }
            if !self.transmits.is_empty() {
                self.transmits.send(socket);
            }
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest train `gso_segments` allows is sent whole: the kernel
    /// takes it in one send and the receiver gets every datagram, each of
    /// the segment's size (here without GRO, so one read each).
    #[test]
    fn the_longest_gso_train_is_sent_whole() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let to = receiver.local_addr().unwrap();
        let sender = bind("127.0.0.1:0".parse().unwrap(), false, None).unwrap();
        // QUIC's smallest datagram; the path MTU found on Ethernet; a size
        // whose train ends within 28 bytes of 65,535 (one segment more, or
        // a limit of 65,535 bytes, and the kernel refuses it); one so small
        // that the segment count is the limit (128 since Linux 6.x, 64 before).
        for segment in [1200, 1452, 1489, 900] {
            let count = gso_segments(segment);
            assert!(count > 10, "{segment}: {count}");
            let train: Vec<u8> = (0..segment * count).map(|i| (i / segment) as u8).collect();
            let datagram = OutgoingDatagram {
                to,
                from: None,
                bytes: &train,
                segment: Some(segment as u16),
            };
            assert_eq!(sys::send_datagrams(sender.as_fd(), &[datagram]).unwrap(), 1);
            let mut buf = [0u8; 2048];
            for i in 0..count {
                let len = receiver.recv(&mut buf).unwrap();
                assert_eq!(len, segment);
                assert!(buf[..len].iter().all(|&b| b == i as u8), "{segment}: {i}");
            }
        }
    }

    /// Whether the machine has IPv6 loopback; the IPv6 cases are skipped,
    /// saying so, without it.
    fn has_ipv6_loopback() -> bool {
        let has = UdpSocket::bind("[::1]:0").is_ok();
        if !has {
            // No print macro in src/serve (one on a closed
            // stderr panics): a lost line only loses the notice.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "no IPv6 loopback on this machine: the IPv6 cases are skipped"
            );
        }
        has
    }

    /// How long a datagram sent on loopback may take to arrive: loopback
    /// delivers in the sender's softirq, which a busy machine can push to
    /// ksoftirqd and run late; a bound in time, not in tries, so that the
    /// tests do not fail only under load.
    const DELIVERY: std::time::Duration = std::time::Duration::from_secs(5);

    /// `socket`'s next batch, waited for up to `DELIVERY`.
    fn receive_soon(received: &mut Received, socket: &UdpSocket) -> usize {
        let deadline = std::time::Instant::now() + DELIVERY;
        while std::time::Instant::now() < deadline {
            let n = received.receive(socket).unwrap();
            if n > 0 {
                return n;
            }
            std::thread::yield_now();
        }
        0
    }

    /// Sends both header forms from each of `clients` to a group of three
    /// sockets bound on `group` (with `only_v6`): each datagram reaches
    /// the socket its first connection-ID byte names.
    fn steer(group: &str, only_v6: bool, clients: &[&str]) {
        let first = bind(group.parse().unwrap(), only_v6, Some(3)).unwrap();
        let addr = first.local_addr().unwrap();
        let sockets = [
            first,
            bind(addr, only_v6, None).unwrap(),
            bind(addr, only_v6, None).unwrap(),
        ];
        for client in clients {
            let client = UdpSocket::bind(client).unwrap();
            let mut to = client.local_addr().unwrap();
            to.set_port(addr.port());
            for thread in 0..3u8 {
                let mut long = [0u8; 40];
                long[0] = 0xc0;
                long[5] = 8;
                long[6] = thread;
                let mut short = [0u8; 40];
                short[0] = 0x40;
                short[1] = thread + 3;
                for packet in [&long, &short] {
                    client.send_to(packet, to).unwrap();
                    let mut received = Received::default();
                    let mut got = Vec::new();
                    let deadline = std::time::Instant::now() + DELIVERY;
                    while std::time::Instant::now() < deadline {
                        for (i, socket) in sockets.iter().enumerate() {
                            if received.receive(socket).unwrap() > 0 {
                                got.push(i);
                                received.for_each(|_, _, d| assert_eq!(&d[..], &packet[..]));
                            }
                        }
                        if !got.is_empty() {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    assert_eq!(got, [usize::from(thread)], "from {to} to {group}");
                }
            }
        }
    }

    /// The steering program sends a datagram to the socket its first
    /// connection-ID byte names, in either header form, on an IPv4 group
    /// and on a dual-stack one (IPv4 and IPv6 clients alike).
    #[test]
    fn datagrams_reach_the_socket_their_connection_id_names() {
        steer("127.0.0.1:0", true, &["127.0.0.1:0"]);
        if has_ipv6_loopback() {
            steer("[::]:0", false, &["127.0.0.1:0", "[::1]:0"]);
        }
    }

    /// A GSO train of three datagrams from a client bound on `client` to
    /// `server`'s port at `to`, answered with a train from the address
    /// the server saw it sent to: asserts every datagram arrived whole
    /// both ways, and returns where the train came from and went to as
    /// the server saw it (sender, destination), and where the answer came
    /// from as the client saw it.
    fn exchange_train(
        server: &UdpSocket,
        client: &str,
        to: IpAddr,
    ) -> (SocketAddr, Option<IpAddr>, SocketAddr) {
        let port = server.local_addr().unwrap().port();
        let client = bind(client.parse().unwrap(), true, None).unwrap();
        let train: Vec<u8> = (0..30).collect();
        let sent = sys::send_datagrams(
            client.as_fd(),
            &[OutgoingDatagram {
                to: (to, port).into(),
                from: None,
                bytes: &train,
                segment: Some(10),
            }],
        )
        .unwrap();
        assert_eq!(sent, 1);
        let mut received = Received::default();
        let mut got = Vec::new();
        while got.len() < 3 && receive_soon(&mut received, server) > 0 {
            received.for_each(|peer, local, d| got.push((peer, local, d.to_vec())));
        }
        let (peer, local, _) = got[0].clone();
        let expected: Vec<_> = train
            .chunks(10)
            .map(|c| (peer, local, c.to_vec()))
            .collect();
        assert_eq!(got, expected, "to {to}");

        let mut transmits = Transmits::default();
        let mut answer = transmits.buffer();
        answer.extend_from_slice(&train);
        transmits.queue(Some(peer), local, answer, Some(10));
        transmits.send(server);
        let mut back = Vec::new();
        while back.len() < 3 && receive_soon(&mut received, &client) > 0 {
            received.for_each(|from, _, d| back.push((from, d.to_vec())));
        }
        let from = back.first().map(|(from, _)| *from).expect("an answer");
        let expected: Vec<_> = train.chunks(10).map(|c| (from, c.to_vec())).collect();
        assert_eq!(back, expected, "to {to}");
        (peer, local, from)
    }

    /// A dual-stack socket sees an IPv4 client at its IPv4-mapped address,
    /// receives its GSO train as whole datagrams, and answers it there, a
    /// GSO train too.
    #[test]
    fn a_dual_stack_socket_serves_ipv4_clients_at_their_mapped_address() {
        if !has_ipv6_loopback() {
            return;
        }
        let server = bind("[::]:0".parse().unwrap(), false, Some(1)).unwrap();
        let port = server.local_addr().unwrap().port();
        let localhost = std::net::Ipv4Addr::LOCALHOST;
        let (peer, _, from) = exchange_train(&server, "127.0.0.1:0", localhost.into());
        assert_eq!(peer.ip(), IpAddr::from(localhost.to_ipv6_mapped()));
        assert_eq!(from, (localhost, port).into());
    }

    /// A socket on a wildcard address answers from the address each
    /// client wrote to (every 127/8 address is this host's: the route to
    /// a 127.0.0.1 client would pick 127.0.0.1), an IPv4 one and a
    /// dual-stack one (IPv4 and IPv6 clients); a socket on one address
    /// reports none, and answers from its own.
    #[test]
    fn a_wildcard_socket_answers_from_the_address_each_datagram_came_to() {
        let second: IpAddr = "127.0.0.2".parse().unwrap();
        let mut cases = vec![
            ("0.0.0.0:0", true, "127.0.0.1:0", second, Some(second)),
            ("127.0.0.2:0", true, "127.0.0.1:0", second, None),
        ];
        if has_ipv6_loopback() {
            let mapped = "::ffff:127.0.0.2".parse().unwrap();
            let one: IpAddr = "::1".parse().unwrap();
            cases.push(("[::]:0", false, "127.0.0.1:0", second, Some(mapped)));
            cases.push(("[::]:0", false, "[::1]:0", one, Some(one)));
        }
        for (group, only_v6, client, to, seen) in cases {
            let server = bind(group.parse().unwrap(), only_v6, Some(1)).unwrap();
            let port = server.local_addr().unwrap().port();
            let (_, local, from) = exchange_train(&server, client, to);
            assert_eq!(local, seen, "{group}, to {to}");
            assert_eq!(from, (to, port).into(), "{group}, to {to}");
        }
    }
}
