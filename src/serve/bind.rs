//! Start-up's listening sockets: the addresses `--listen`, `--listen-tls`
//! and systemd give, each bound once per serving thread (`SO_REUSEPORT`),
//! HTTP/3's UDP twin of each TLS port, and the `--metrics` listener. A
//! bind that fails stops the start with one line naming the address (and,
//! for a port below 1024, how to get one).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::listen::Listen;
use super::net::{LoopConfig, Shared};
use super::{QuicRetry, ServeArgs, net, quic, stack, systemd};

/// A thread's listeners, each with the stack tag of its connections.
pub(super) type Listeners = Vec<(std::net::TcpListener, u32)>;

/// The default port, on loopback, when no `--listen` is given.
pub(super) const DEFAULT_PORT: u16 = 8080;

/// The addresses `--listen` and `--listen-tls` ask for, each with the
/// stack tag of its connections, or the default when neither flags nor
/// systemd name any.
pub(super) fn listen_addresses(
    args: &ServeArgs,
    activated: bool,
) -> anyhow::Result<Vec<(Listen, u32)>> {
    if args.listen.is_empty() && args.listen_tls.is_empty() {
        if activated {
            return Ok(Vec::new());
        }
        return Ok(vec![(Listen::loopback(DEFAULT_PORT), stack::CLEARTEXT)]);
    }
    let parse = |flag: &str, v: &String, tag: u32| {
        Listen::parse(v)
            .map(|l| (l, tag))
            .map_err(|why| anyhow::anyhow!("--{flag} {v:?}: {why}"))
    };
    let clear = args
        .listen
        .iter()
        .map(|v| parse("listen", v, stack::CLEARTEXT));
    let tls = args
        .listen_tls
        .iter()
        .map(|v| parse("listen-tls", v, stack::TLS));
    clear.chain(tls).collect()
}

/// True when binding failed because the machine has no IPv6 (no stack, or
/// no such address on any interface).
pub(super) fn no_ipv6(addr: SocketAddr, e: &std::io::Error) -> bool {
    addr.is_ipv6()
        && matches!(
            rustix::io::Errno::from_io_error(e),
            Some(
                rustix::io::Errno::AFNOSUPPORT
                    | rustix::io::Errno::PROTONOSUPPORT
                    | rustix::io::Errno::ADDRNOTAVAIL
            )
        )
}

/// Ports the kernel offers for a TLS listener before one whose UDP twin
/// is free too (HTTP/3 serves there): a port free for TCP may be a UDP
/// client's, as the kernel picks both from one range.
pub(super) const TLS_PORT_TRIES: usize = 64;

/// Binds every address once per thread, each address once however many
/// values name it. The first bind of a value resolves port 0 (for TLS
/// with `udp_twins`, to a port whose UDP twin is free as well), and its
/// other addresses get the same port.
pub(super) fn bind_all(
    listens: &[(Listen, u32)],
    threads: usize,
    udp_twins: bool,
) -> anyhow::Result<Vec<Listeners>> {
    let mut per_thread: Vec<Listeners> = (0..threads).map(|_| Vec::new()).collect();
    let mut bound: Vec<SocketAddr> = Vec::new();
    for (listen, tag) in listens {
        let mut chosen_port = None;
        for &asked in &listen.addrs {
            let mut addr = asked;
            if let (0, Some(port)) = (addr.port(), chosen_port) {
                addr.set_port(port);
            }
            if addr.port() != 0 && bound.contains(&addr) {
                continue;
            }
            let needs_twin = udp_twins && *tag == stack::TLS && addr.port() == 0;
            let first = match bind_first(addr, needs_twin) {
                Ok(l) => l,
                Err(e) if listen.implied && no_ipv6(addr, &e) => {
                    tracing::info!("not listening on {addr}: no IPv6 on this machine ({e})");
                    continue;
                }
                Err(e) => {
                    let context = cannot_listen(addr, &e);
                    return Err(e).context(context);
                }
            };
            let local = first.local_addr()?;
            chosen_port.get_or_insert(local.port());
            bound.push(local);
            per_thread[0].push((first, *tag));
            for listeners in per_thread.iter_mut().skip(1) {
                let l = net::bind(local).with_context(|| format!("cannot listen on {local}"))?;
                listeners.push((l, *tag));
            }
        }
    }
    Ok(per_thread)
}

/// What a failed bind says: the address, and for a port below 1024
/// refused to a user other than root, the ways to get one.
pub(super) fn cannot_listen(addr: SocketAddr, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied && addr.port() < 1024 {
        format!(
            "cannot listen on {addr}: a port below 1024 needs root (start as root with \
             --user to serve as another user) or CAP_NET_BIND_SERVICE (as \
             deploy/kiln.service gives), or listen on a port from 1024 up"
        )
    } else {
        format!("cannot listen on {addr}")
    }
}

/// The first listener of `addr`; with `needs_twin` (port 0 for TLS), on a
/// port whose UDP twin is free too.
pub(super) fn bind_first(
    addr: SocketAddr,
    needs_twin: bool,
) -> std::io::Result<std::net::TcpListener> {
    net::check_free(addr)?;
    if !needs_twin {
        return net::bind(addr);
    }
    for _ in 1..TLS_PORT_TRIES {
        let listener = net::bind(addr)?;
        if net::udp::check_free(listener.local_addr()?).is_ok() {
            return Ok(listener);
        }
    }
    net::bind(addr)
}

/// HTTP/3's sockets and settings, unless `--no-http3` or no listener
/// speaks TLS: once the TCP ports are known, before the sandbox. `keys`:
/// those `--quic-host-key` gave, else random ones.
pub(super) fn quic_sockets(
    args: &ServeArgs,
    listeners: &[Listeners],
    threads: usize,
    loop_config: &LoopConfig,
    keys: Option<quic::Keys>,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<Http3>> {
    let has_tls = listeners[0].iter().any(|(_, tag)| *tag == stack::TLS);
    if args.no_http3 || !has_tls {
        return Ok(None);
    }
    let sockets = bind_quic(listeners, threads)?;
    let port = sockets[0]
        .first()
        .and_then(|s| s.local_addr().ok())
        .map(|a| a.port());
    let alt_svc = port.map(|p| format!("h3=\":{p}\"; ma={}", args.alt_svc_max_age));
    let config = quic::QuicConfig {
        idle_timeout: Duration::from_millis(loop_config.keepalive_timeout_ms.max(1000)),
        handshake_timeout: Duration::from_millis(loop_config.header_timeout_ms.max(1000)),
        retry_from: match args.quic_retry {
            QuicRetry::Auto => quic::HANDSHAKES_BEFORE_RETRY,
            QuicRetry::Always => 0,
        },
        keys: match keys {
            Some(keys) => keys,
            None => quic::Keys::random().map_err(|_| anyhow::anyhow!("QUIC: no random key"))?,
        },
        max_connections: loop_config.max_connections,
        shared: Arc::clone(shared),
    };
    Ok(Some(Http3 {
        sockets,
        config: Arc::new(config),
        alt_svc,
    }))
}

/// HTTP/3's UDP sockets, per thread, and what its endpoints share.
pub(super) struct Http3 {
    pub(super) sockets: Vec<Vec<UdpSocket>>,
    pub(super) config: Arc<quic::QuicConfig>,
    /// `Alt-Svc`'s value (`h3=":PORT"; ma=N`), sent on TLS responses.
    pub(super) alt_svc: Option<String>,
}

/// One UDP socket per thread on each TLS address (HTTP/3), bound in
/// thread order on the port its TCP listener took, with that listener's
/// `IPV6_V6ONLY` (whoever bound it: kiln, or systemd), the first of each
/// address steering datagrams by connection ID (`net::udp::bind`).
///
/// A bind that fails stops the start, as Caddy (HTTP/3 on by default too)
/// and nginx (`listen ... quic`) do: serving on without HTTP/3 would go
/// unseen until someone asks why no client uses it. The one line names the
/// address and both ways out.
pub(super) fn bind_quic(
    listeners: &[Listeners],
    threads: usize,
) -> anyhow::Result<Vec<Vec<UdpSocket>>> {
    let mut per_thread: Vec<Vec<UdpSocket>> = (0..threads).map(|_| Vec::new()).collect();
    let tls_listeners = listeners[0].iter().filter(|(_, tag)| *tag == stack::TLS);
    for (listener, _) in tls_listeners {
        let addr = listener.local_addr()?;
        let only_v6 = addr.is_ipv6() && socket2::SockRef::from(listener).only_v6()?;
        for (thread, sockets) in per_thread.iter_mut().enumerate() {
            let steer = (thread == 0).then_some(threads as u32);
            let socket = net::udp::bind(addr, only_v6, steer).map_err(|e| {
                let families = if addr.is_ipv6() && !only_v6 {
                    " (IPv6 and IPv4)"
                } else {
                    ""
                };
                anyhow::anyhow!(
                    "cannot listen on UDP {addr}{families} for HTTP/3: {e}; HTTP/3 needs \
                     the UDP twin of each TLS port (under systemd: SocketBindAllow=udp:PORT, \
                     and CAP_NET_BIND_SERVICE below 1024, as in deploy/kiln.service), or \
                     turn it off with --no-http3"
                )
            })?;
            sockets.push(socket);
        }
    }
    Ok(per_thread)
}

/// The metrics listener's sockets, one per address `--metrics` names
/// (`:PORT` is every IPv4 and IPv6 address, as for --listen).
pub(super) fn bind_metrics(value: &str) -> anyhow::Result<Vec<std::net::TcpListener>> {
    let listen =
        Listen::parse(value).map_err(|why| anyhow::anyhow!("--metrics {value:?}: {why}"))?;
    let mut bound = Vec::new();
    let mut port = None;
    for &asked in &listen.addrs {
        let mut addr = asked;
        if let (0, Some(p)) = (addr.port(), port) {
            addr.set_port(p);
        }
        let listener = match socket2_listener(addr) {
            Ok(l) => l,
            Err(e) if listen.implied && no_ipv6(addr, &e) => continue,
            Err(e) => return Err(e).with_context(|| format!("--metrics: cannot listen on {addr}")),
        };
        port.get_or_insert(listener.local_addr()?.port());
        bound.push(listener);
    }
    Ok(bound)
}

/// A listening socket on `addr` (IPv6 only for an IPv6 address, so that
/// `[::]` and `0.0.0.0` can both be bound).
pub(super) fn socket2_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_cloexec(true)?;
    socket.bind(&addr.into())?;
    socket.listen(64)?;
    Ok(socket.into())
}

/// Adds the sockets systemd passed to every thread's listeners: one
/// socket, shared by every loop (each its own descriptor of it).
pub(super) fn add_activated(
    per_thread: &mut [Listeners],
    activated: Vec<(std::net::TcpListener, u32)>,
) -> anyhow::Result<()> {
    for (listener, tag) in activated {
        for listeners in per_thread.iter_mut().skip(1) {
            // Another descriptor of the one socket, which every loop
            // accepts from.
            let shared = listener
                .try_clone()
                .context("cannot share an activated socket")?;
            listeners.push((shared, tag));
        }
        per_thread[0].push((listener, tag));
    }
    Ok(())
}

/// The sockets systemd passed, by what they are for.
pub(super) struct Activated {
    /// Connections to serve, each with its stack tag.
    pub(super) serving: Vec<(std::net::TcpListener, u32)>,
    /// The metrics listener's.
    pub(super) metrics: Vec<std::net::TcpListener>,
}

/// Sorts systemd's sockets by their names (cleartext, TLS, metrics) and
/// says which it got: before the TLS flags are checked, since a TLS socket
/// of systemd's needs certificates as a `--listen-tls` address does.
pub(super) fn sort_activated(activated: Vec<systemd::Activated>) -> Activated {
    let mut sorted = Activated {
        serving: Vec::new(),
        metrics: Vec::new(),
    };
    for a in activated {
        match a.purpose {
            systemd::Purpose::Cleartext => sorted.serving.push((a.listener, stack::CLEARTEXT)),
            systemd::Purpose::Tls => sorted.serving.push((a.listener, stack::TLS)),
            systemd::Purpose::Metrics => sorted.metrics.push(a.listener),
        }
        tracing::info!("listening on a socket from systemd: {}", a.name);
    }
    sorted
}

/// Binds every thread's listeners, adds systemd's sockets to them, and
/// binds the metrics listener: before the sandbox, and before the steps
/// that need the ports the kernel chose for port 0 (the HTTPS port
/// `--redirect-https` names, the start-up line).
pub(super) fn bind_listeners(
    args: &ServeArgs,
    listens: &[(Listen, u32)],
    threads: usize,
    activated: Activated,
) -> anyhow::Result<(Vec<Listeners>, Vec<std::net::TcpListener>)> {
    let mut listeners = bind_all(listens, threads, !args.no_http3)?;
    add_activated(&mut listeners, activated.serving)?;
    let mut metrics_listeners = activated.metrics;
    if let Some(value) = &args.metrics {
        metrics_listeners.extend(bind_metrics(value)?);
    }
    Ok((listeners, metrics_listeners))
}

/// The URLs the server answers on, for the start-up line; none is an
/// error (systemd may have passed only a metrics socket). Checked once
/// bound, before the certificates are loaded and said.
pub(super) fn serving_urls(listeners: &[Listeners]) -> anyhow::Result<Vec<String>> {
    let urls: Vec<String> = listeners[0]
        .iter()
        .filter_map(|(l, tag)| {
            let scheme = if *tag == stack::TLS { "https" } else { "http" };
            l.local_addr().ok().map(|a| format!("{scheme}://{a}/"))
        })
        .collect();
    if urls.is_empty() {
        bail!("no address to listen on");
    }
    Ok(urls)
}
