//! systemd integration without libsystemd: socket activation (the
//! listeners a socket unit passes, `LISTEN_FDS` / `LISTEN_FDNAMES`) and
//! readiness notification (`sd_notify`: READY, RELOADING, STOPPING, for a
//! `Type=notify-reload` service). Both are plain protocols over the
//! environment and a datagram socket, and kiln needs nothing else of
//! systemd.

use std::net::TcpListener;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;

use anyhow::bail;
use rustix::io::FdFlags;
use rustix::net::{AddressFamily, SocketType, sockopt};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;

/// What an activated socket is for, told by its name
/// (`FileDescriptorName=` in the socket unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Plain HTTP (any name but the ones below; systemd's default name is
    /// the socket unit's).
    Cleartext,
    /// HTTPS: a name that is `https` or `tls`, or starts with `https-` or
    /// `tls-`.
    Tls,
    /// The metrics listener: `metrics`.
    Metrics,
}

impl Purpose {
    fn of(name: &str) -> Purpose {
        let is = |word: &str| {
            name == word
                || name
                    .strip_prefix(word)
                    .is_some_and(|rest| rest.starts_with('-'))
        };
        if is("https") || is("tls") {
            Purpose::Tls
        } else if name == "metrics" {
            Purpose::Metrics
        } else {
            Purpose::Cleartext
        }
    }
}

/// A listening socket systemd passed.
#[derive(Debug)]
pub struct Activated {
    pub listener: TcpListener,
    /// Its `FileDescriptorName=`.
    pub name: String,
    pub purpose: Purpose,
}

/// The listeners systemd passed this process, if any; the variables are
/// removed so that nothing started later takes them for its own. Called
/// while the process has one thread (the environment is changed).
pub fn listeners() -> anyhow::Result<Vec<Activated>> {
    let Ok(pid) = std::env::var("LISTEN_PID") else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        // Meant for another process (a parent that did not clear them).
        return Ok(Vec::new());
    }
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    let Ok(count) = count.trim().parse::<RawFd>() else {
        bail!("LISTEN_FDS={count:?}: not a number of descriptors");
    };
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    // SAFETY: kiln has a single thread when this runs (`serve::run` calls
    // it before starting any), so nothing reads the environment meanwhile.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    let mut names = names.split(':');
    let mut activated = Vec::new();
    for fd in FIRST_FD..FIRST_FD.saturating_add(count) {
        let name = names.next().unwrap_or("unknown").to_string();
        // SAFETY: systemd handed this descriptor to the process, open; it
        // is only looked at until it is taken over below.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        check_listening_tcp(borrowed).map_err(|why| {
            anyhow::anyhow!(
                "LISTEN_FDS: descriptor {fd} ({name}) is {why}; kiln takes listening TCP sockets"
            )
        })?;
        // SAFETY: systemd handed this descriptor to the process; it is
        // taken over once, here.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        rustix::io::fcntl_setfd(&owned, FdFlags::CLOEXEC)?;
        let listener = TcpListener::from(owned);
        listener.set_nonblocking(true)?;
        // As for kiln's own listeners (`net::bind`): accepted sockets
        // inherit it, whatever the socket unit said.
        socket2::SockRef::from(&listener).set_tcp_nodelay(true)?;
        activated.push(Activated {
            listener,
            purpose: Purpose::of(&name),
            name,
        });
    }
    Ok(activated)
}

/// Fails, saying what the descriptor is, unless it is a listening TCP
/// socket.
fn check_listening_tcp(fd: BorrowedFd<'_>) -> Result<(), &'static str> {
    let Ok(kind) = sockopt::socket_type(fd) else {
        return Err("not an open socket");
    };
    let family = sockopt::socket_domain(fd);
    if kind != SocketType::STREAM
        || !matches!(family, Ok(AddressFamily::INET | AddressFamily::INET6))
    {
        return Err("not a TCP socket");
    }
    if !matches!(sockopt::socket_acceptconn(fd), Ok(true)) {
        return Err("not listening");
    }
    Ok(())
}

/// The service manager's notification socket (`NOTIFY_SOCKET`), connected
/// at start, before the sandbox: afterwards a notification is one `write`.
pub struct Notifier {
    socket: UnixDatagram,
    /// Read at start: `getpid` is not among the calls the sandbox allows.
    pid: u32,
}

impl Notifier {
    /// Connects to `NOTIFY_SOCKET` when systemd set it (and removes it from
    /// the environment); `None` otherwise. A socket that cannot be reached
    /// is logged, and kiln runs without notifying.
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        // SAFETY: single-threaded, as for `listeners`.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let connected = UnixDatagram::unbound().and_then(|socket| {
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
            match bytes.strip_prefix(b"@") {
                Some(abstract_name) => {
                    use std::os::linux::net::SocketAddrExt;
                    let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
                    socket.connect_addr(&addr)?;
                }
                None => socket.connect(&path)?,
            }
            Ok(socket)
        });
        match connected {
            Ok(socket) => Some(Notifier {
                socket,
                pid: std::process::id(),
            }),
            Err(e) => {
                tracing::warn!(
                    "NOTIFY_SOCKET={}: cannot connect ({e}); not notifying the service manager",
                    path.to_string_lossy()
                );
                None
            }
        }
    }

    /// Serving: `status` is shown by `systemctl status`.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}\nMAINPID={}\n", self.pid));
    }

    /// A reload starts (`Type=notify-reload` waits for the READY after it).
    pub fn reloading(&self) {
        let usec = super::net::clock::monotonic_us();
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}\n"));
    }

    /// The shutdown began.
    pub fn stopping(&self) {
        self.send("STOPPING=1\n");
    }

    /// One datagram, with `write` (the system call filter allows it; the
    /// socket is connected). A lost notification is logged, not fatal.
    fn send(&self, message: &str) {
        if let Err(errno) = rustix::io::write(&self.socket, message.as_bytes()) {
            tracing::warn!(
                "cannot notify the service manager: {}",
                std::io::Error::from(errno)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_what_a_socket_is_for() {
        for (name, purpose) in [
            ("http", Purpose::Cleartext),
            ("kiln.socket", Purpose::Cleartext),
            ("unknown", Purpose::Cleartext),
            ("https", Purpose::Tls),
            ("tls", Purpose::Tls),
            ("https-v6", Purpose::Tls),
            ("tls-public", Purpose::Tls),
            ("httpsx", Purpose::Cleartext),
            ("metrics", Purpose::Metrics),
        ] {
            assert_eq!(Purpose::of(name), purpose, "{name}");
        }
    }

    #[test]
    fn notifications_arrive_as_datagrams() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let manager = UnixDatagram::bind(&path).unwrap();
        let socket = UnixDatagram::unbound().unwrap();
        socket.connect(&path).unwrap();
        let notifier = Notifier { socket, pid: 1 };
        notifier.ready("serving");
        notifier.reloading();
        notifier.stopping();
        let mut buf = [0u8; 256];
        let mut next = || {
            let n = manager.recv(&mut buf).unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        let ready = next();
        assert!(
            ready.starts_with("READY=1\nSTATUS=serving\nMAINPID="),
            "{ready}"
        );
        let reloading = next();
        assert!(
            reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{reloading}"
        );
        assert_eq!(next(), "STOPPING=1\n");
    }
}
