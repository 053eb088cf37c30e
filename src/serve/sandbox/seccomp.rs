//! The seccomp filter: the system calls the serving threads make, per
//! back end ([`allowed_syscalls`]), each with why (`docs/security.md` has
//! a row for each), compiled into the program [`super::enter`] installs.

use std::collections::BTreeMap;

use anyhow::anyhow;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::serve::net::Backend;
use crate::sys::seccomp as kernel;

/// A test on one argument of a system call: `(arg & mask) == value`.
#[derive(Clone, Copy, Debug)]
pub struct ArgTest {
    /// Which argument, from 0.
    pub arg: u8,
    /// The bits compared (of the argument's low 32 bits).
    pub mask: u32,
    /// What those bits must be.
    pub value: u32,
}

/// One system call the filter lets through.
#[derive(Clone, Debug)]
pub struct Syscall {
    /// The libc constant it is known by (`SYS_read`).
    pub constant: &'static str,
    /// Its number on this architecture.
    pub nr: i64,
    /// Let through only when one of these holds; empty: with any
    /// arguments.
    pub only_if: Vec<ArgTest>,
}

impl Syscall {
    /// The system call's name (`read`).
    pub fn name(&self) -> &'static str {
        self.constant.trim_start_matches("SYS_")
    }
}

/// `sys!(SYS_read)`: allowed with any arguments; `sys!(SYS_prctl, if arg 0
/// & MASK => VALUE)`: allowed only when `(arg 0 & MASK) == VALUE`;
/// `sys!(SYS_fcntl, if arg 1 in [A, B])`: only when arg 1 is A or B.
#[cfg(target_arch = "x86_64")]
macro_rules! sys {
    ($constant:ident) => {
        Syscall {
            constant: stringify!($constant),
            nr: kernel::$constant,
            only_if: Vec::new(),
        }
    };
    ($constant:ident, if arg $arg:literal & $mask:expr => $value:expr) => {
        Syscall {
            constant: stringify!($constant),
            nr: kernel::$constant,
            only_if: vec![ArgTest {
                arg: $arg,
                mask: $mask as u32,
                value: $value as u32,
            }],
        }
    };
    ($constant:ident, if arg $arg:literal in [$($value:expr),+]) => {
        Syscall {
            constant: stringify!($constant),
            nr: kernel::$constant,
            only_if: vec![$(ArgTest {
                arg: $arg,
                mask: u32::MAX,
                value: $value as u32,
            }),+],
        }
    };
}

/// glibc's internal signal for applying a set*id call to every thread
/// (SIGSETXID, the second real-time signal); its handler is installed at
/// the process's first `pthread_create`.
#[cfg(target_arch = "x86_64")]
const GLIBC_SIGSETXID: u32 = 33;

/// What every thread needs whatever the back end: the control thread
/// (signals, inotify, reloads of packs, directory sites and certificates),
/// logging, memory, threads, shutdown. Measured: every call made after
/// `seccomp` by the servers of the whole serve suite, cleartext and TLS,
/// under `strace -f` (docs/security.md); two more are kept for paths the
/// suite does not take, each said below.
#[cfg(target_arch = "x86_64")]
fn common_syscalls() -> Vec<Syscall> {
    vec![
        // Logs and the start-up line to stderr, `--access-log -` to stdout,
        // the access-log file, eventfd wake-ups; reads of the signalfd,
        // inotify, eventfds, and of files at reloads.
        sys!(SYS_write),
        sys!(SYS_read),
        // Reloads open the new pack, certificates, a directory site's files.
        sys!(SYS_openat),
        sys!(SYS_close),
        // std's IO-safety check before each close in debug builds; a
        // preview pack's in-memory file is duplicated for reading back
        // (`File::try_clone`).
        // A pack written in place (`serve::in_place`): a read lease taken
        // on each pack a reload opens, asked about and let go when a
        // writer breaks it; the pack's descriptor kept for that moment.
        sys!(
            SYS_fcntl,
            if arg 1 in [
                kernel::F_GETFD,
                kernel::F_DUPFD_CLOEXEC,
                kernel::F_SETLEASE,
                kernel::F_GETLEASE
            ]
        ),
        // The copy of a pack whose lease a writer broke put at the pack's
        // descriptor number (`sendfile` and `splice` read it there).
        sys!(SYS_dup3),
        // Reloads: file sizes and types, `Path::exists`, a directory walk.
        sys!(SYS_fstat),
        sys!(SYS_newfstatat),
        sys!(SYS_statx),
        sys!(SYS_lseek),
        // A directory site's listings, at each reload.
        sys!(SYS_getdents64),
        // A directory site's symbolic links, resolved at each reload to
        // skip those that lead out of it (glibc and musl: readlink, not
        // readlinkat).
        sys!(SYS_readlink),
        // A preview pack (a directory or archive site, at each reload and
        // each `--watch` rebuild) is written in an anonymous in-memory
        // file: made, sized, written and read back at offsets.
        sys!(SYS_memfd_create),
        sys!(SYS_ftruncate),
        sys!(SYS_pwrite64),
        sys!(SYS_pread64),
        // `--watch`: folders created under the site are watched too.
        sys!(SYS_inotify_add_watch),
        // Memory: the allocator, pack mappings, thread stacks and their
        // guard pages; never executable. mremap: glibc's realloc of a
        // block above its mmap threshold (not in the suite).
        sys!(SYS_brk),
        sys!(SYS_mmap, if arg 2 & kernel::PROT_EXEC => 0),
        sys!(SYS_mprotect, if arg 2 & kernel::PROT_EXEC => 0),
        sys!(SYS_munmap),
        sys!(SYS_mremap),
        sys!(SYS_madvise),
        // `--mlock`: a reloaded pack is locked in memory.
        sys!(SYS_mlock),
        // Threads: locks, joins and rayon's idle waits; creating the event
        // loops, the control thread and a preview build's pool; what glibc
        // and std set up in each (robust futex list, restartable sequences,
        // the stack-overflow signal stack found through
        // pthread_getattr_np, signals blocked around clone, the name).
        sys!(SYS_futex),
        sys!(SYS_sched_yield),
        sys!(SYS_clone3),
        sys!(SYS_set_robust_list),
        sys!(SYS_rseq),
        sys!(SYS_sigaltstack),
        sys!(SYS_sched_getaffinity),
        sys!(SYS_gettid),
        sys!(SYS_rt_sigprocmask),
        sys!(SYS_rt_sigaction, if arg 0 & u32::MAX => GLIBC_SIGSETXID),
        // The return from the bus-error handler (`serve::in_place`), which
        // made a read of a pack written in place good.
        sys!(SYS_rt_sigreturn),
        sys!(SYS_prctl, if arg 0 & u32::MAX => kernel::PR_SET_NAME),
        // The control thread's wait on the signalfd and inotify; the
        // metrics listener's waits (rustix's poll is ppoll).
        sys!(SYS_ppoll),
        // Connections: the epoll loops', and the metrics listener's on
        // either back end.
        sys!(SYS_accept4),
        // rustls (aws-lc) and std's hash seeds.
        sys!(SYS_getrandom),
        // The clocks are read through the vDSO, which falls back to the
        // system call on a clock source it cannot read (not here).
        sys!(SYS_clock_gettime),
        // The kernel's restart of a system call a signal or a tracer's
        // stop interrupted (SIGSTOP/SIGCONT, `strace -p` attaching): without
        // it, stopping the server for a moment would end it.
        sys!(SYS_restart_syscall),
        // A thread ends; the process ends.
        sys!(SYS_exit),
        sys!(SYS_exit_group),
    ]
}

/// `IORING_REGISTER_ENABLE_RINGS` (linux/io_uring.h).
const IORING_REGISTER_ENABLE_RINGS: u32 = 12;

/// What the event loops of `backend` need on top of [`common_syscalls`].
#[cfg(target_arch = "x86_64")]
fn backend_syscalls(backend: Backend) -> Vec<Syscall> {
    match backend {
        Backend::Epoll => vec![
            // Readiness (rustix's epoll wait is epoll_pwait, with no
            // signal mask), and registering accepted connections.
            sys!(SYS_epoll_pwait),
            sys!(SYS_epoll_ctl),
            // A batch of responses in one call; large bodies from the pack.
            // (Requests are read with `read`, in the common list.)
            sys!(SYS_writev),
            sys!(SYS_sendfile),
            // Half-closing a connection before lingering on it.
            sys!(SYS_shutdown),
            // HTTP/3: datagrams received and sent in batches on the
            // loop's UDP sockets (QUIC).
            sys!(SYS_recvmmsg),
            sys!(SYS_sendmmsg),
        ],
        Backend::Uring => vec![
            // Submitting and reaping: accepts, receives, writes, splices,
            // closes are ring operations, restricted by
            // IORING_REGISTER_RESTRICTIONS (net::uring).
            sys!(SYS_io_uring_enter),
            // Each loop enables its ring (made and restricted before the
            // sandbox, still disabled) from its own thread, which makes
            // that thread the ring's only submitter; nothing else.
            sys!(SYS_io_uring_register, if arg 1 & u32::MAX => IORING_REGISTER_ENABLE_RINGS),
            // Half-closing a connection before lingering on it (a ring
            // shutdown would run on a kernel worker, too late).
            sys!(SYS_shutdown),
            // The peer's address, for the access log (multishot accept
            // reports none).
            sys!(SYS_getpeername),
            // HTTP/3: datagrams received and sent in batches on the
            // loop's UDP sockets (QUIC), whose readiness the ring reports.
            sys!(SYS_recvmmsg),
            sys!(SYS_sendmmsg),
            // Emptying a splice pipe a closed connection left bytes in:
            // how many, then reading them out; at shutdown, whether an idle
            // connection holds a request not delivered yet.
            sys!(SYS_ioctl, if arg 1 & u32::MAX => kernel::FIONREAD),
        ],
    }
}

/// The lists are measured on x86_64 only: elsewhere there is no filter,
/// and `enter` says so.
#[cfg(not(target_arch = "x86_64"))]
fn common_syscalls() -> Vec<Syscall> {
    Vec::new()
}

/// See the x86_64 version.
#[cfg(not(target_arch = "x86_64"))]
fn backend_syscalls(_backend: Backend) -> Vec<Syscall> {
    Vec::new()
}

/// What musl's C library calls where glibc calls something else, for the
/// static build (`deploy/build-static`): measured on musl 1.2.5 (Rust's
/// x86_64-unknown-linux-musl) with every serve scenario under `strace -f`
/// and the filter logging instead of trapping, both back ends.
#[cfg(all(target_arch = "x86_64", target_env = "musl"))]
fn libc_syscalls(_backend: Backend) -> Vec<Syscall> {
    /// The flags of musl's `pthread_create` (VM, FS, FILES, SIGHAND,
    /// THREAD, SYSVSEM, SETTLS, PARENT_SETTID, CHILD_CLEARTID, DETACHED):
    /// a thread, never a new process.
    const PTHREAD_CLONE_FLAGS: u32 = 0x7d_0f00;
    vec![
        // Every thread started after the filter: musl's pthread_create
        // calls clone, not clone3.
        sys!(SYS_clone, if arg 0 & u32::MAX => PTHREAD_CLONE_FLAGS),
        // std's File::open and read_dir at reloads: musl's open and
        // opendir use open, not openat, then set FD_CLOEXEC with fcntl.
        sys!(SYS_open),
        sys!(SYS_fcntl, if arg 1 in [kernel::F_SETFD]),
        // fs::metadata and symlink_metadata at reloads (std has no statx
        // on musl).
        sys!(SYS_stat),
        sys!(SYS_lstat),
    ]
}

/// glibc calls what the lists above name.
#[cfg(not(all(target_arch = "x86_64", target_env = "musl")))]
fn libc_syscalls(_backend: Backend) -> Vec<Syscall> {
    Vec::new()
}

/// Every system call the serving threads of `backend` may make: a call
/// listed twice is let through when either list's test holds.
pub fn allowed_syscalls(backend: Backend) -> Vec<Syscall> {
    let mut list = common_syscalls();
    for extra in backend_syscalls(backend)
        .into_iter()
        .chain(libc_syscalls(backend))
    {
        match list.iter_mut().find(|call| call.nr == extra.nr) {
            Some(call) if call.only_if.is_empty() || extra.only_if.is_empty() => {
                call.only_if.clear();
            }
            Some(call) => call.only_if.extend(extra.only_if),
            None => list.push(extra),
        }
    }
    list
}

/// The seccomp program for `backend`: the list, everything else trapped.
pub(super) fn seccomp_program(backend: Backend) -> anyhow::Result<BpfProgram> {
    let unmeasured = || {
        anyhow!(
            "sandbox: no system call list for {}; serve with --no-sandbox",
            std::env::consts::ARCH
        )
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|_| unmeasured())?;
    let allowed = allowed_syscalls(backend);
    if allowed.is_empty() {
        return Err(unmeasured());
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for call in allowed {
        // One rule per test: the call is let through when any holds.
        let conditions = call
            .only_if
            .iter()
            .map(|test| {
                SeccompRule::new(vec![SeccompCondition::new(
                    test.arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(u64::from(test.mask)),
                    u64::from(test.value),
                )?])
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(call.nr, conditions);
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, arch)?;
    Ok(filter.try_into()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECURITY_DOC: &str = include_str!("../../../docs/security.md");

    #[test]
    fn each_list_names_a_system_call_once() {
        for backend in [Backend::Epoll, Backend::Uring] {
            let list = allowed_syscalls(backend);
            let mut numbers: Vec<_> = list.iter().map(|s| s.nr).collect();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers.len(), list.len(), "{backend:?}");
        }
    }

    #[test]
    fn the_security_page_explains_every_allowed_system_call() {
        for backend in [Backend::Epoll, Backend::Uring] {
            for call in allowed_syscalls(backend) {
                let cell = format!("| `{}` |", call.name());
                assert!(
                    SECURITY_DOC.contains(&cell),
                    "docs/security.md has no row for {} ({backend:?})",
                    call.name()
                );
            }
        }
    }

    #[test]
    fn the_filters_compile_for_this_architecture() {
        for backend in [Backend::Epoll, Backend::Uring] {
            assert!(!seccomp_program(backend).unwrap().is_empty());
        }
    }
}
