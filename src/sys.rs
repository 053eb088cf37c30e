//! The system calls and kernel types rustix does not cover, the only place
//! `libc` is named. Everything else goes through `rustix`: this module
//! holds what is left, each with why it is here and its SAFETY note.

/// The iovec the io_uring crate's `Writev` takes (its API is in `libc`
/// types): one per segment of a ring's `writev`.
pub type Iovec = libc::iovec;

/// The iovec of `slice`, for a `writev` on a ring: the caller keeps
/// `slice` alive until the operation completes.
pub fn iovec(slice: &[u8]) -> Iovec {
    Iovec {
        iov_base: slice.as_ptr() as *mut libc::c_void,
        iov_len: slice.len(),
    }
}

/// A set of signals, for the C library's `pthread_sigmask` (which keeps
/// its own signals out of a mask) and `sigtimedwait`: rustix has either
/// only in its runtime feature, meant for programs without a C library.
pub struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// The set of `signals`.
    pub fn of(signals: &[rustix::process::Signal]) -> Self {
        // SAFETY: the set is initialised by sigemptyset before sigaddset
        // adds signal numbers rustix vouches for.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in signals {
                libc::sigaddset(&mut set, signal.as_raw());
            }
            Self(set)
        }
    }

    /// Blocks the set in the calling thread (and so in every thread and
    /// child it starts afterwards), adding to what is blocked already.
    pub fn block(&self) -> std::io::Result<()> {
        self.set_mask(libc::SIG_BLOCK)
    }

    /// Makes the set the calling thread's whole mask: of the empty set,
    /// every signal unblocked.
    pub fn set_as_mask(&self) -> std::io::Result<()> {
        self.set_mask(libc::SIG_SETMASK)
    }

    fn set_mask(&self, how: libc::c_int) -> std::io::Result<()> {
        // SAFETY: a valid set, read by the call; the old mask is not wanted.
        let errno = unsafe { libc::pthread_sigmask(how, &self.0, std::ptr::null_mut()) };
        if errno != 0 {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// Takes a pending signal of the set (which must be blocked), waiting
    /// up to `timeout` for one: `None` when none came, or the wait was
    /// interrupted.
    pub fn wait(&self, timeout: std::time::Duration) -> Option<rustix::process::Signal> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().try_into().unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits any c_long.
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a valid set and timespec, read by the call; the siginfo
        // is not wanted.
        let signal = unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), &ts) };
        rustix::process::Signal::from_named_raw(signal)
    }
}

/// Blocks `signals` in the calling thread (and so in every thread it
/// spawns afterwards) and returns a signalfd that reads them: rustix has
/// neither `pthread_sigmask` nor `signalfd` outside its runtime feature.
pub fn block_signals_into_signalfd(
    signals: &[rustix::process::Signal],
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let set = SignalSet::of(signals);
    set.block()?;
    // SAFETY: signalfd reads a valid set and the result is checked; the
    // descriptor it returns is fresh and owned from here.
    unsafe {
        let fd = libc::signalfd(-1, &set.0, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}

/// What one read of a signalfd returns per signal (`signalfd_siginfo`);
/// its first four bytes are the signal's number.
pub const SIGNALFD_SIGINFO_BYTES: usize = std::mem::size_of::<libc::signalfd_siginfo>();

/// Starts writing back `len` bytes of `file` from `offset`, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which rustix lacks).
/// A failure only means the final sync does all the work.
pub fn start_writeback(file: std::os::fd::BorrowedFd<'_>, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on a descriptor the caller holds open;
    // it touches no memory of ours.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Returns the allocator's free memory to the system (glibc's
/// `malloc_trim`; other C libraries have nothing to call).
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The system call numbers and argument values the seccomp filter names
/// (`serve::sandbox`): the kernel's ABI, which rustix does not export.
pub mod seccomp {
    pub use libc::{
        F_DUPFD_CLOEXEC, F_GETFD, F_GETLEASE, F_SETFD, F_SETLEASE, FIONREAD, PR_SET_NAME,
        PROT_EXEC, SYS_accept4, SYS_brk, SYS_clock_gettime, SYS_clone, SYS_clone3, SYS_close,
        SYS_dup3, SYS_epoll_ctl, SYS_epoll_pwait, SYS_exit, SYS_exit_group, SYS_fcntl, SYS_fstat,
        SYS_ftruncate, SYS_futex, SYS_getdents64, SYS_getpeername, SYS_getrandom, SYS_gettid,
        SYS_inotify_add_watch, SYS_io_uring_enter, SYS_io_uring_register, SYS_ioctl, SYS_lseek,
        SYS_lstat, SYS_madvise, SYS_memfd_create, SYS_mlock, SYS_mmap, SYS_mprotect, SYS_mremap,
        SYS_munmap, SYS_newfstatat, SYS_open, SYS_openat, SYS_ppoll, SYS_prctl, SYS_pread64,
        SYS_pwrite64, SYS_read, SYS_readlink, SYS_recvmmsg, SYS_restart_syscall, SYS_rseq,
        SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sched_getaffinity,
        SYS_sched_yield, SYS_sendfile, SYS_sendmmsg, SYS_set_robust_list, SYS_shutdown,
        SYS_sigaltstack, SYS_stat, SYS_statx, SYS_write, SYS_writev,
    };
}

/// File leases (`fcntl` `F_SETLEASE`, `F_GETLEASE`), which rustix lacks:
/// a read lease makes the kernel hold back any open of the file for
/// writing (and any truncation) and tell the lease holder, by SIGIO to
/// the process, until the holder lets go or `lease-break-time` passes.
pub mod lease {
    use std::os::fd::{AsRawFd, BorrowedFd};

    fn fcntl(fd: BorrowedFd<'_>, command: libc::c_int, arg: libc::c_int) -> std::io::Result<i32> {
        // SAFETY: a lease command on a descriptor the caller holds open;
        // it touches no memory of ours.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), command, arg) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(rc)
    }

    /// Takes a read lease on `fd` (opened read-only). Refused when any
    /// process has the file open for writing (EAGAIN), when the caller
    /// neither owns the file nor has CAP_LEASE (EACCES), and by
    /// filesystems without leases (EINVAL).
    pub fn take_read(fd: BorrowedFd<'_>) -> std::io::Result<()> {
        fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK).map(drop)
    }

    /// Lets the lease on `fd` go: a writer held back proceeds.
    pub fn release(fd: BorrowedFd<'_>) -> std::io::Result<()> {
        fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK).map(drop)
    }

    /// Whether the read lease on `fd` is being broken: while a writer
    /// waits, `F_GETLEASE` says what the lease is broken to (no lease),
    /// not the read lease still held.
    pub fn breaking(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
        Ok(fcntl(fd, libc::F_GETLEASE, 0)? != libc::F_RDLCK)
    }
}

/// What [`on_bus_error`] calls with the faulting address: true when it
/// made the access good (mapped something there), so that the faulting
/// instruction runs again. Must be async-signal-safe.
pub type BusErrorHandler = fn(usize) -> bool;

static BUS_ERROR_HANDLER: std::sync::OnceLock<BusErrorHandler> = std::sync::OnceLock::new();

/// The exit status after a bus error no handler made good: 128 + SIGBUS,
/// as a shell reports a process killed by that signal.
pub const BUS_ERROR_EXIT: i32 = 128 + libc::SIGBUS;

/// The SIGBUS handler: hands the faulting address to the handler given to
/// [`on_bus_error`]; when that cannot make the access good, writes one
/// line and ends the process. Async-signal-safe (an atomic load, the
/// handler, write and _exit).
extern "C" fn on_bus_error_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel hands a SIGBUS handler a siginfo with `si_addr`.
    let address = unsafe { (*info).si_addr() } as usize;
    if BUS_ERROR_HANDLER
        .get()
        .is_some_and(|handle| handle(address))
    {
        return;
    }
    let line = b"kiln: bus error outside the packs served (a mapped file shrank); exiting\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(BUS_ERROR_EXIT);
    }
}

/// Installs `handler` for bus errors (a read of a mapped file past its
/// end, once the file shrank), in place of the C library's and std's
/// (std's stack-overflow report uses SIGSEGV for guard pages on Linux,
/// and reinstalls the default action with `sigaction`, which the seccomp
/// filter refuses). Installed once, before the sandbox.
pub fn on_bus_error(handler: BusErrorHandler) -> std::io::Result<()> {
    let _ = BUS_ERROR_HANDLER.set(handler);
    // SAFETY: a zeroed sigaction with the handler, flags and an empty mask
    // (initialised by sigemptyset); the result is checked.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_bus_error_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One entry of the user database.
pub struct Passwd {
    /// The user's name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

/// The user database's entry for `name` (`getpwnam_r`: the C library's
/// name service, which rustix has no part of); `Ok(None)` when there is
/// none.
pub fn passwd_by_name(name: &std::ffi::CStr) -> std::io::Result<Option<Passwd>> {
    lookup_passwd(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; buf's length is given.
        unsafe { libc::getpwnam_r(name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// The user database's entry for `uid` (`getpwuid_r`).
pub fn passwd_by_uid(uid: u32) -> std::io::Result<Option<Passwd>> {
    lookup_passwd(|pwd, buf, result| {
        // SAFETY: as in `passwd_by_name`.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// Runs a `getpw*_r` call with a buffer that grows until the entry fits.
fn lookup_passwd(
    call: impl Fn(&mut libc::passwd, &mut [libc::c_char], &mut *mut libc::passwd) -> libc::c_int,
) -> std::io::Result<Option<Passwd>> {
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        match call(&mut pwd, &mut buf, &mut result) {
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            0 if result.is_null() => return Ok(None),
            // "Not found" as some C libraries say it: musl when there is
            // no /etc/passwd at all (a `FROM scratch` image), glibc with
            // some NSS modules (getpwnam_r(3)).
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            0 => {
                // SAFETY: on success pw_name points to a C string in `buf`.
                let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
                return Ok(Some(Passwd {
                    name: name.to_string_lossy().into_owned(),
                    uid: pwd.pw_uid,
                    gid: pwd.pw_gid,
                }));
            }
            e => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}

/// Sets the supplementary groups to those the user database lists for
/// `user`, and `gid` (`initgroups`: the C library's name service).
pub fn init_groups(user: &std::ffi::CStr, gid: u32) -> std::io::Result<()> {
    // SAFETY: a valid C string; the result is checked.
    if unsafe { libc::initgroups(user.as_ptr(), gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The exit status after a system call the seccomp filter refused: 128 +
/// SIGSYS, as a shell reports a process killed by that signal.
pub const DENIED_SYSCALL_EXIT: i32 = 128 + libc::SIGSYS;

/// The fields of a SIGSYS `siginfo_t` on 64-bit Linux (`_sigsys`).
#[repr(C)]
struct SigsysInfo {
    /// SIGSYS.
    signo: libc::c_int,
    /// Unused.
    errno: libc::c_int,
    /// SYS_SECCOMP.
    code: libc::c_int,
    /// Where the call was made.
    call_addr: *mut libc::c_void,
    /// The system call's number.
    syscall: libc::c_int,
    /// Its AUDIT_ARCH.
    arch: libc::c_uint,
}

/// The SIGSYS handler: the filter refused a system call. Writes one line
/// naming it and ends the process with [`DENIED_SYSCALL_EXIT`];
/// async-signal-safe (write and _exit only, both on the filter's list).
extern "C" fn on_denied_syscall(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel hands a SIGSYS handler a siginfo with `_sigsys`.
    let number = unsafe { (*info.cast::<SigsysInfo>()).syscall };
    let mut line = [0u8; 96];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        let n = bytes.len().min(line.len() - len);
        line[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    put(b"kiln: sandbox: system call ");
    // `itoa` writes into a stack buffer: async-signal-safe.
    put(itoa::Buffer::new().format(number).as_bytes());
    put(b" is not allowed; exiting\n");
    // SAFETY: write(2) and _exit(2) are async-signal-safe; a failed write
    // changes nothing.
    unsafe {
        libc::write(2, line.as_ptr().cast(), len);
        libc::_exit(DENIED_SYSCALL_EXIT);
    }
}

/// Installs the handler that reports a system call the seccomp filter
/// refused and exits (rustix has no `sigaction` outside its runtime).
pub fn exit_on_denied_syscall() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction with the handler, flags and an empty mask.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_denied_syscall as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Replaces the process with `program`, without arguments; returns only
/// when that failed (debug builds' sandbox probe, which expects the
/// filter to refuse it).
#[cfg(debug_assertions)]
pub fn execute(program: &std::ffi::CStr) -> std::io::Error {
    let argv = [program.as_ptr(), std::ptr::null()];
    // SAFETY: a valid path and a NULL-terminated argv.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    std::io::Error::last_os_error()
}

/// Kernel TLS (cargo feature `ktls`): the ULP and crypto-info socket
/// options and their constants and structures, none of which rustix has.
#[cfg(feature = "ktls")]
pub mod ktls {
    pub use libc::{
        EIO, ENOENT, SOL_TCP, SOL_TLS, TCP_ULP, TLS_1_2_VERSION, TLS_1_3_VERSION,
        TLS_CIPHER_AES_GCM_128, TLS_CIPHER_AES_GCM_128_IV_SIZE, TLS_CIPHER_AES_GCM_128_KEY_SIZE,
        TLS_CIPHER_AES_GCM_128_REC_SEQ_SIZE, TLS_CIPHER_AES_GCM_128_SALT_SIZE,
        TLS_CIPHER_AES_GCM_256, TLS_CIPHER_AES_GCM_256_IV_SIZE, TLS_CIPHER_AES_GCM_256_KEY_SIZE,
        TLS_CIPHER_AES_GCM_256_REC_SEQ_SIZE, TLS_CIPHER_AES_GCM_256_SALT_SIZE,
        TLS_CIPHER_CHACHA20_POLY1305, TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE,
        TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE, TLS_CIPHER_CHACHA20_POLY1305_REC_SEQ_SIZE,
        TLS_CIPHER_CHACHA20_POLY1305_SALT_SIZE, TLS_RX, TLS_TX, tls12_crypto_info_aes_gcm_128,
        tls12_crypto_info_aes_gcm_256, tls12_crypto_info_chacha20_poly1305,
    };

    /// Sets the socket option `name` of `level` on `fd` to the bytes of
    /// `value`.
    pub fn set_socket_option(
        fd: std::os::fd::RawFd,
        level: libc::c_int,
        name: libc::c_int,
        value: &[u8],
    ) -> std::io::Result<()> {
        // Option values here are a few dozen bytes: the cast is lossless.
        let len = value.len() as libc::socklen_t;
        // SAFETY: `value` points to `len` readable bytes that live through
        // the call; the kernel copies them and keeps no pointer. A bad `fd`
        // is an error return (EBADF, ENOTSOCK), not undefined behaviour.
        let rc = unsafe { libc::setsockopt(fd, level, name, value.as_ptr().cast(), len) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Has the kernel reap this process's children as they end
/// (`SA_NOCLDWAIT` with the default action): the sandboxed server has no
/// `wait` call. Not `SIG_IGN`, which a child would inherit across exec,
/// and its own wait for its children would fail. rustix has no
/// `sigaction` outside its runtime feature.
pub fn reap_children_automatically() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction with the default action, an empty mask
    // (initialised by sigemptyset) and one flag; the result is checked.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        action.sa_flags = libc::SA_NOCLDWAIT;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The clocks the event loops read (`net::clock`).
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    Monotonic,
    MonotonicCoarse,
    RealtimeCoarse,
}

/// Reads `clock` as (seconds, nanoseconds), through the C library's
/// vDSO call (no system call). Not rustix's: its vDSO lookup reads memory
/// valgrind does not map, so every kiln under callgrind (bench/callgrind.sh)
/// died at its first clock read (rustix issue 1559).
pub fn clock_gettime(clock: Clock) -> (i64, i64) {
    let id = match clock {
        Clock::Monotonic => libc::CLOCK_MONOTONIC,
        Clock::MonotonicCoarse => libc::CLOCK_MONOTONIC_COARSE,
        Clock::RealtimeCoarse => libc::CLOCK_REALTIME_COARSE,
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; these clocks always exist
    // on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
}

/// `UDP_SEGMENT` and `UDP_GRO` (linux/udp.h): not in the libc crate for
/// glibc targets.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// The most datagrams one `recvmmsg` or `sendmmsg` call takes here.
pub const DATAGRAM_BATCH: usize = 16;

/// One datagram `recv_datagrams` received: `len` bytes at the start of its
/// slot, coalesced by GRO into `segment`-byte datagrams (the last one
/// shorter) when the kernel did so. `local`: the address it was sent to,
/// when the socket reports it (`enable_packet_info`), in the family of
/// `peer` (IPv4-mapped on a dual-stack socket); GRO coalesces only
/// datagrams of one flow, so a train has one.
#[derive(Clone, Copy, Debug)]
pub struct ReceivedDatagram {
    pub len: usize,
    pub peer: std::net::SocketAddr,
    pub local: Option<std::net::IpAddr>,
    pub segment: Option<usize>,
}

/// Turns UDP generic receive offload on: the kernel hands several
/// datagrams of one flow over in one slot (`ReceivedDatagram::segment`).
/// An error means the kernel lacks it, which only costs batching.
pub fn enable_udp_gro(socket: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    set_int_option(socket, libc::SOL_UDP, UDP_GRO, on)
}

/// Makes `recv_datagrams` report each datagram's destination address
/// (`IP_PKTINFO`, `IPV6_RECVPKTINFO`), which `send_datagrams` then
/// sends from. `ipv4` for an IPv4 socket or a dual-stack IPv6 one (its
/// IPv4 peers), `ipv6` for an IPv6 one.
pub fn enable_packet_info(
    socket: std::os::fd::BorrowedFd<'_>,
    ipv4: bool,
    ipv6: bool,
) -> std::io::Result<()> {
    if ipv4 {
        set_int_option(socket, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    }
    if ipv6 {
        set_int_option(socket, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    }
    Ok(())
}

fn set_int_option(
    socket: std::os::fd::BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `value` is a valid c_int for the call, its size given.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches a classic BPF program to `socket`'s `SO_REUSEPORT` group that
/// picks the group's `dcid_first_byte % sockets`-th socket for each
/// datagram: the first byte of a QUIC packet's destination connection ID
/// (offset 6 in a long header, 1 in a short one). A datagram too short to
/// read returns 0, the first socket.
pub fn steer_reuseport_by_first_cid_byte(
    socket: std::os::fd::BorrowedFd<'_>,
    sockets: u32,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const LD_B_ABS: u16 = 0x30;
    const JSET_K: u16 = 0x45;
    const JA: u16 = 0x05;
    const MOD_K: u16 = 0x94;
    const RET_A: u16 = 0x16;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut program = [
        op(LD_B_ABS, 0, 0, 0),
        // Long header (first bit set): on to the next; short: skip 2.
        op(JSET_K, 0, 2, 0x80),
        op(LD_B_ABS, 0, 0, 6),
        op(JA, 0, 0, 1),
        op(LD_B_ABS, 0, 0, 1),
        op(MOD_K, 0, 0, sockets.max(1)),
        op(RET_A, 0, 0, 0),
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `program`, alive for the call; the kernel
    // copies it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The C address of `addr`.
fn sockaddr_of(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let sa = socket2::SockAddr::from(addr);
    // SAFETY: sockaddr_storage is plain data, zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = sa.len() as usize;
    // SAFETY: `sa` holds `len` bytes of address, at most a storage's size.
    unsafe {
        std::ptr::copy_nonoverlapping(
            sa.as_ptr().cast::<u8>(),
            (&raw mut storage).cast::<u8>(),
            len,
        )
    };
    (storage, len as libc::socklen_t)
}

/// The address the kernel wrote into `storage`.
fn socket_addr_of(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<std::net::SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say it is a sockaddr_in.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some((ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family and length say it is a sockaddr_in6.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(
                std::net::SocketAddrV6::new(ip, u16::from_be(a.sin6_port), 0, a.sin6_scope_id)
                    .into(),
            )
        }
        _ => None,
    }
}

/// Room for the control messages of one datagram: received, `UDP_GRO`
/// (an int) and both packet infos (a dual-stack socket's IPv4 datagram
/// has both); sent, `UDP_SEGMENT` (a u16) and one packet info.
// SAFETY: CMSG_SPACE only computes.
const CMSG_ROOM: usize = unsafe {
    (libc::CMSG_SPACE(size_of::<libc::c_int>() as u32)
        + libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32)
        + libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32)) as usize
};

/// Control-message buffers, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; CMSG_ROOM]);

impl CmsgBuf {
    /// Writes a control message of `value` at byte `at` (0, or what the
    /// previous `put` returned): where the next one goes, which is also
    /// the `msg_controllen` of those written so far.
    fn put<T: Copy>(
        &mut self,
        at: usize,
        level: libc::c_int,
        kind: libc::c_int,
        value: T,
    ) -> usize {
        // SAFETY: CMSG_SPACE and CMSG_LEN only compute.
        let (space, len) = unsafe {
            (
                libc::CMSG_SPACE(size_of::<T>() as u32) as usize,
                libc::CMSG_LEN(size_of::<T>() as u32) as usize,
            )
        };
        assert!(at + space <= CMSG_ROOM, "control messages beyond CMSG_ROOM");
        // SAFETY: the message (header, then data at CMSG_DATA's offset)
        // lies inside the buffer (asserted above); `at` is a sum of
        // CMSG_SPACEs, so the header is aligned as the buffer is.
        unsafe {
            let c = self.0.as_mut_ptr().add(at).cast::<libc::cmsghdr>();
            (*c).cmsg_len = len as _;
            (*c).cmsg_level = level;
            (*c).cmsg_type = kind;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<T>(), value);
        }
        at + space
    }
}

/// Receives up to `DATAGRAM_BATCH` datagrams with one `recvmmsg`, the
/// i-th into `slots[i*slot..(i+1)*slot]`, described in `out`. Returns how
/// many arrived (0 when none: `EAGAIN`); a datagram whose sender has no
/// IP address is skipped (len 0).
pub fn recv_datagrams(
    socket: std::os::fd::BorrowedFd<'_>,
    slots: &mut [u8],
    slot: usize,
    out: &mut [ReceivedDatagram; DATAGRAM_BATCH],
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let count = (slots.len() / slot).min(DATAGRAM_BATCH);
    // SAFETY (zeroed): plain C structures, all-zero is valid.
    let mut names: [libc::sockaddr_storage; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    let mut iovs: [libc::iovec; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    let mut cmsgs = [CmsgBuf([0; CMSG_ROOM]); DATAGRAM_BATCH];
    let mut msgs: [libc::mmsghdr; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    let base = slots.as_mut_ptr();
    for i in 0..count {
        iovs[i] = libc::iovec {
            // SAFETY: slot i lies inside `slots`.
            iov_base: unsafe { base.add(i * slot) }.cast(),
            iov_len: slot,
        };
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_name = (&raw mut names[i]).cast();
        hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_iov = &raw mut iovs[i];
        hdr.msg_iovlen = 1;
        hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
        hdr.msg_controllen = CMSG_ROOM;
    }
    // SAFETY: every pointer in `msgs` points at the arrays above or into
    // `slots`, alive and writable for the call, with their lengths.
    let n = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
            _ => Err(err),
        };
    }
    let n = n as usize;
    for i in 0..n {
        let hdr = &msgs[i].msg_hdr;
        let peer = socket_addr_of(&names[i], hdr.msg_namelen);
        let mut segment = None;
        let mut local = None;
        // SAFETY: the kernel filled the control buffer up to
        // msg_controllen; the CMSG macros stay inside it, and each
        // message's data is read as the type its level and type name.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_UDP, UDP_GRO) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        segment = usize::try_from(v).ok().filter(|&s| s > 0);
                    }
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let info = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                        let ip = std::net::Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
                        local = Some(std::net::IpAddr::V4(ip));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let info = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                        let ip = std::net::Ipv6Addr::from(info.ipi6_addr.s6_addr);
                        local = Some(std::net::IpAddr::V6(ip));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        out[i] = match peer {
            Some(peer) => ReceivedDatagram {
                len: msgs[i].msg_len as usize,
                peer,
                local: local.map(|ip| in_family_of(ip, peer)),
                segment,
            },
            None => ReceivedDatagram {
                len: 0,
                peer: (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
                local: None,
                segment: None,
            },
        };
    }
    Ok(n)
}

/// `local` as `peer` writes addresses: IPv4-mapped for an IPv6 peer (a
/// dual-stack socket's IPv4 one, whose `IP_PKTINFO` says IPv4).
fn in_family_of(local: std::net::IpAddr, peer: std::net::SocketAddr) -> std::net::IpAddr {
    match (local, peer) {
        (std::net::IpAddr::V4(ip), std::net::SocketAddr::V6(_)) => ip.to_ipv6_mapped().into(),
        _ => local,
    }
}

/// One datagram (or, with `segment`, a GSO train of them) to send.
#[derive(Clone, Copy, Debug)]
pub struct OutgoingDatagram<'a> {
    pub to: std::net::SocketAddr,
    /// The source address (`IP_PKTINFO` / `IPV6_PKTINFO`), else the one
    /// the route picks.
    pub from: Option<std::net::IpAddr>,
    pub bytes: &'a [u8],
    /// Cut `bytes` into datagrams of this size (UDP GSO).
    pub segment: Option<u16>,
}

/// Sends up to `DATAGRAM_BATCH` of `batch` with one `sendmmsg`; returns
/// how many the kernel took (it stops at the first that fails, whose
/// error is returned only when none was sent).
pub fn send_datagrams(
    socket: std::os::fd::BorrowedFd<'_>,
    batch: &[OutgoingDatagram<'_>],
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let count = batch.len().min(DATAGRAM_BATCH);
    if count == 0 {
        return Ok(0);
    }
    // SAFETY (zeroed): plain C structures, all-zero is valid.
    let mut names: [libc::sockaddr_storage; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    let mut iovs: [libc::iovec; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    let mut cmsgs = [CmsgBuf([0; CMSG_ROOM]); DATAGRAM_BATCH];
    let mut msgs: [libc::mmsghdr; DATAGRAM_BATCH] = unsafe { std::mem::zeroed() };
    for (i, d) in batch[..count].iter().enumerate() {
        let (name, len) = sockaddr_of(d.to);
        names[i] = name;
        iovs[i] = iovec(d.bytes);
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_name = (&raw mut names[i]).cast();
        hdr.msg_namelen = len;
        hdr.msg_iov = &raw mut iovs[i];
        hdr.msg_iovlen = 1;
        let control = &mut cmsgs[i];
        let mut used = 0;
        if let Some(segment) = d.segment.filter(|&s| (s as usize) < d.bytes.len()) {
            used = control.put(used, libc::SOL_UDP, UDP_SEGMENT, segment);
        }
        match d.from {
            Some(std::net::IpAddr::V4(ip)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(ip).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                used = control.put(used, libc::IPPROTO_IP, libc::IP_PKTINFO, info);
            }
            // An IPv4-mapped one goes too, to an IPv4-mapped peer (the
            // kernel takes it for IPv4's source).
            Some(std::net::IpAddr::V6(ip)) => {
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                used = control.put(used, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, info);
            }
            None => {}
        }
        if used > 0 {
            hdr.msg_control = control.0.as_mut_ptr().cast();
            hdr.msg_controllen = used;
        }
    }
    // SAFETY: every pointer in `msgs` points at the arrays above or at
    // the caller's bytes, alive for the call, with their lengths.
    let n = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}
