//! The walls `kiln serve` runs inside. Once the listeners are bound and the
//! pack and certificates opened, and before any serving thread starts,
//! [`enter`]:
//!
//! 1. switches to an unprivileged user (`--user`; `nobody` by default when
//!    started as root) and drops every capability;
//! 2. sets no_new_privs;
//! 3. enters a Landlock domain: files are read only beneath the folders of
//!    the pack (or beneath a directory site) and of the certificates and
//!    keys, written nowhere (a preview pack is fired into memory); no
//!    TCP bind or connect, no signal to a process outside the domain;
//! 4. installs a seccomp filter that lets through only the system calls the
//!    serving threads make ([`allowed_syscalls`]); any other ends the
//!    process, after one line on stderr.
//!
//! The user switch and Landlock hold for the calling thread and the threads
//! it creates afterwards, not for threads already running: `enter` refuses
//! to run beside another thread (a preview build's rayon pool is joined
//! before it returns, see `build::build_preview`; `enter` waits for joined
//! threads to be gone from the kernel too). The seccomp filter is
//! installed with TSYNC all the same. `docs/security.md` has the threat
//! model and why each system call is on the list.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use landlock::{
    ABI, Access, AccessFs, AccessNet, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::net::Backend;

/// The Landlock ABI whose rights kiln asks for: the newest it was tested
/// on (Linux 6.15 and later). An older kernel enforces what it knows (best
/// effort); the start-up log says which.
const LANDLOCK_ABI: ABI = ABI::V7;

/// The exit status after a system call outside the list: 128 + SIGSYS, as
/// a shell reports a process killed by that signal.
pub const DENIED_SYSCALL_EXIT: i32 = 128 + libc::SIGSYS;

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
    pub nr: libc::c_long,
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
            nr: libc::$constant,
            only_if: Vec::new(),
        }
    };
    ($constant:ident, if arg $arg:literal & $mask:expr => $value:expr) => {
        Syscall {
            constant: stringify!($constant),
            nr: libc::$constant,
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
            nr: libc::$constant,
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
        sys!(SYS_fcntl, if arg 1 in [libc::F_GETFD, libc::F_DUPFD_CLOEXEC]),
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
        sys!(SYS_mmap, if arg 2 & libc::PROT_EXEC => 0),
        sys!(SYS_mprotect, if arg 2 & libc::PROT_EXEC => 0),
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
        sys!(SYS_prctl, if arg 0 & u32::MAX => libc::PR_SET_NAME),
        // The control thread's wait on the signalfd and inotify; the
        // metrics listener's waits.
        sys!(SYS_poll),
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
            // Readiness, and registering accepted connections.
            sys!(SYS_epoll_wait),
            sys!(SYS_epoll_ctl),
            // A batch of responses in one call; large bodies from the pack.
            // (Requests are read with `read`, in the common list.)
            sys!(SYS_writev),
            sys!(SYS_sendfile),
            // Half-closing a connection before lingering on it.
            sys!(SYS_shutdown),
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
            // Emptying a splice pipe a closed connection left bytes in:
            // how many, then reading them out; at shutdown, whether an idle
            // connection holds a request not delivered yet.
            sys!(SYS_ioctl, if arg 1 & u32::MAX => libc::FIONREAD),
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
fn libc_syscalls(backend: Backend) -> Vec<Syscall> {
    /// The flags of musl's `pthread_create` (VM, FS, FILES, SIGHAND,
    /// THREAD, SYSVSEM, SETTLS, PARENT_SETTID, CHILD_CLEARTID, DETACHED):
    /// a thread, never a new process.
    const PTHREAD_CLONE_FLAGS: u32 = 0x7d_0f00;
    let mut list = vec![
        // Every thread started after the filter: musl's pthread_create
        // calls clone, not clone3.
        sys!(SYS_clone, if arg 0 & u32::MAX => PTHREAD_CLONE_FLAGS),
        // std's File::open and read_dir at reloads: musl's open and
        // opendir use open, not openat, then set FD_CLOEXEC with fcntl.
        sys!(SYS_open),
        sys!(SYS_fcntl, if arg 1 in [libc::F_SETFD]),
        // fs::metadata and symlink_metadata at reloads (std has no statx
        // on musl).
        sys!(SYS_stat),
        sys!(SYS_lstat),
    ];
    if backend == Backend::Epoll {
        // musl's epoll_wait is epoll_pwait with no signal mask.
        list.push(sys!(SYS_epoll_pwait));
    }
    list
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
fn seccomp_program(backend: Backend) -> anyhow::Result<BpfProgram> {
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

/// The user the server runs as once started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The user's name.
    pub name: String,
    /// Its user id.
    pub uid: libc::uid_t,
    /// Its primary group.
    pub gid: libc::gid_t,
    /// Found in the user database, which then lists its other groups;
    /// otherwise (a bare `UID[:GID]`) it gets its primary group only.
    pub listed: bool,
}

/// The passwd entry of `name`, if there is one.
fn lookup_user(name: &str) -> anyhow::Result<Option<Identity>> {
    let c_name = CString::new(name).map_err(|_| anyhow!("--user {name:?}: NUL in the name"))?;
    lookup(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; buf's length is given.
        unsafe { libc::getpwnam_r(c_name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// The passwd entry of `uid`, if there is one.
fn lookup_uid(uid: libc::uid_t) -> anyhow::Result<Option<Identity>> {
    lookup(|pwd, buf, result| {
        // SAFETY: as in `lookup_user`.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// Runs a `getpw*_r` call with a buffer that grows until the entry fits.
fn lookup(
    call: impl Fn(&mut libc::passwd, &mut [libc::c_char], &mut *mut libc::passwd) -> libc::c_int,
) -> anyhow::Result<Option<Identity>> {
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
                let name = unsafe { CStr::from_ptr(pwd.pw_name) };
                return Ok(Some(Identity {
                    name: name.to_string_lossy().into_owned(),
                    uid: pwd.pw_uid,
                    gid: pwd.pw_gid,
                    listed: true,
                }));
            }
            e => bail!(
                "cannot read the user database: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        }
    }
}

/// `UID` or `UID:GID` given as `--user` where no user database names it (a
/// container image without /etc/passwd); the group is the user id when
/// not given, as for `nobody` (65534:65534).
fn numeric_user(value: &str) -> Option<Identity> {
    let (uid, gid) = match value.split_once(':') {
        Some((uid, gid)) => (uid.parse().ok()?, gid.parse().ok()?),
        None => {
            let uid = value.parse().ok()?;
            (uid, uid)
        }
    };
    Some(Identity {
        name: value.to_string(),
        uid,
        gid,
        listed: false,
    })
}

/// The user to run as: `--user NAME` if given, else `nobody` when started
/// as root (kiln refuses to serve as root unless `--user root` says so),
/// else the user kiln runs as, the only one a process without privileges
/// can be.
pub fn resolve_user(asked: Option<&str>) -> anyhow::Result<Identity> {
    // SAFETY: plain getters.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let current = || -> anyhow::Result<Identity> {
        Ok(lookup_uid(euid)?.unwrap_or(Identity {
            name: euid.to_string(),
            uid: euid,
            gid: egid,
            listed: false,
        }))
    };
    let named = |name: &str| -> anyhow::Result<Identity> {
        if let Some(found) = lookup_user(name)? {
            return Ok(found);
        }
        numeric_user(name).ok_or_else(|| anyhow!("--user {name}: no such user"))
    };
    match (euid, asked) {
        (0, Some(name)) => named(name),
        (0, None) => lookup_user("nobody")?.ok_or_else(|| {
            anyhow!(
                "started as root and there is no user `nobody` to switch to: \
                 name one with --user NAME (or serve as root with --user root)"
            )
        }),
        (_, None) => current(),
        (_, Some(name)) => {
            let asked = named(name)?;
            let current = current()?;
            if asked.uid != current.uid {
                bail!(
                    "--user {name}: kiln runs as {} and only root can switch users",
                    current.name
                );
            }
            Ok(current)
        }
    }
}

/// The folders a file is read from again after start: the one holding it
/// as named and, when it is a symbolic link, the one holding the file the
/// link resolves to now (Landlock checks the resolved file's place).
fn folders_of(file: &Path) -> Vec<PathBuf> {
    let named = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut folders = vec![named];
    if let Some(resolved) = std::fs::canonicalize(file)
        .ok()
        .and_then(|f| f.parent().map(Path::to_path_buf))
        && !folders.contains(&resolved)
    {
        folders.push(resolved);
    }
    folders
}

/// What the server may touch once the sandbox is up.
pub struct Plan {
    /// Who to run as.
    pub identity: Identity,
    /// Which event loop serves (decides the system call list).
    pub backend: Backend,
    /// Files read again after start (the pack, certificates and keys, a
    /// tar site): their folders become readable.
    files_read_again: Vec<PathBuf>,
    /// Directory sites, fired again at each reload: everything beneath is
    /// readable.
    trees_read_again: Vec<PathBuf>,
}

impl Plan {
    pub fn new(identity: Identity, backend: Backend) -> Plan {
        Plan {
            identity,
            backend,
            files_read_again: Vec::new(),
            trees_read_again: Vec::new(),
        }
    }

    /// `file`, and any file later renamed into its folder, is read again.
    pub fn read_file_again(&mut self, file: &Path) {
        self.files_read_again.push(file.to_path_buf());
    }

    /// Every file and folder beneath `dir` is read again.
    pub fn read_tree_again(&mut self, dir: &Path) {
        self.trees_read_again.push(dir.to_path_buf());
    }
}

/// How long [`enter`] waits for joined threads to leave the process.
const JOINED_THREADS_GRACE: Duration = Duration::from_secs(10);

/// Waits until the calling thread is the only thread of this process, and
/// fails, naming the others, if some are still listed after
/// [`JOINED_THREADS_GRACE`].
///
/// Every thread kiln starts before the sandbox (a preview build's pool and
/// compressors) is joined before `enter` is called, but a join returns when
/// the kernel clears the thread's TID (`CLONE_CHILD_CLEARTID`, early in its
/// exit), and the thread is removed from the thread group, and from
/// `/proc/self/task`, only at the end of its exit: on a busy machine the
/// exiting thread can wait for a CPU between the two for many milliseconds.
/// Counting at once refused a preview in up to half of the starts beside a
/// compiler; waiting for the listing to shrink makes the check hold
/// whatever the load, and a thread that really runs on still fails it.
fn wait_until_single_threaded() -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let others = other_threads()
            .map_err(|e| anyhow!("sandbox: cannot list this process's threads: {e}"))?;
        if others.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= JOINED_THREADS_GRACE {
            let names: Vec<String> = others.iter().map(|tid| thread_name(*tid)).collect();
            bail!(
                "sandbox: {} other threads still run after {} s ({}), and the user switch and Landlock would not hold for them",
                others.len(),
                JOINED_THREADS_GRACE.as_secs(),
                names.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The TIDs of this process's threads other than the calling one.
fn other_threads() -> std::io::Result<Vec<u32>> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    let mut others = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let tid = entry?.file_name().to_str().and_then(|n| n.parse().ok());
        if let Some(tid) = tid.filter(|t| *t != me) {
            others.push(tid);
        }
    }
    Ok(others)
}

/// A thread's name as the kernel shows it, for an error message.
fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).map_or_else(
        |_| format!("thread {tid}"),
        |n| format!("{} ({tid})", n.trim_end()),
    )
}

/// Builds the Landlock ruleset of `plan`, opening its folders (with the
/// rights of the user kiln started as).
fn landlock_ruleset(plan: &Plan) -> anyhow::Result<RulesetCreated> {
    let abi = LANDLOCK_ABI;
    let fail = |e: landlock::RulesetError| anyhow!("sandbox: Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(fail)?
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?;
    let read_files = plan.files_read_again.iter().flat_map(|f| folders_of(f));
    let rules = read_files
        .map(|folder| (folder, AccessFs::ReadFile.into()))
        .chain(
            plan.trees_read_again
                .iter()
                .map(|dir| (dir.clone(), AccessFs::ReadFile | AccessFs::ReadDir)),
        );
    for (folder, access) in rules {
        let fd = PathFd::new(&folder)
            .with_context(|| format!("sandbox: cannot open {}", folder.display()))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(fail)?;
    }
    Ok(ruleset)
}

/// Switches to `identity` (supplementary groups, group, then user: each
/// later step needs the privileges the user switch gives up) and drops
/// every capability, also when staying root.
pub fn switch_user(identity: &Identity) -> anyhow::Result<()> {
    // SAFETY: plain getter.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 && identity.uid != 0 {
        let name = CString::new(identity.name.as_bytes()).context("NUL in the user name")?;
        let fail = |what: &str| {
            anyhow!(
                "cannot switch to user {}: {what}: {}",
                identity.name,
                std::io::Error::last_os_error()
            )
        };
        // glibc applies each of these to every thread of the process (its
        // setxid broadcast); there is only one here anyway.
        // SAFETY: plain calls with valid arguments; results checked.
        unsafe {
            let groups = if identity.listed {
                libc::initgroups(name.as_ptr(), identity.gid)
            } else {
                libc::setgroups(1, &identity.gid)
            };
            if groups != 0 {
                return Err(fail("setgroups"));
            }
            if libc::setresgid(identity.gid, identity.gid, identity.gid) != 0 {
                return Err(fail("setgid"));
            }
            if libc::setresuid(identity.uid, identity.uid, identity.uid) != 0 {
                return Err(fail("setuid"));
            }
            if libc::setuid(0) == 0 {
                bail!(
                    "switched to user {} but could switch back to root",
                    identity.name
                );
            }
        }
    }
    drop_capabilities()
}

/// `capset(2)`'s header.
#[repr(C)]
struct CapHeader {
    /// `_LINUX_CAPABILITY_VERSION_3`.
    version: u32,
    /// 0: this thread.
    pid: libc::c_int,
}

/// `capset(2)`'s data, one per 32 capabilities.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    /// Capabilities in use.
    effective: u32,
    /// Capabilities that may be made effective.
    permitted: u32,
    /// Capabilities kept across execve.
    inheritable: u32,
}

/// Empties the effective, permitted and inheritable sets (and so the
/// ambient one). The bounding set matters only at execve, which the filter
/// refuses.
fn drop_capabilities() -> anyhow::Result<()> {
    let header = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: a valid header and two data structs, as version 3 wants.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        bail!(
            "cannot drop capabilities: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Whether the user kiln runs as now may `mode` (`access(2)` bits) `path`;
/// the error says why not.
fn may(path: &Path, mode: libc::c_int) -> std::io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string; access(2) checks the real ids, which are
    // the switched-to user's now.
    if unsafe { libc::access(c_path.as_ptr(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The first directory or file under `root` (itself included) the user
/// kiln runs as now cannot read, with why; symbolic links are not
/// followed (their targets are checked where the build reads them).
fn first_unreadable(root: &Path) -> Option<(PathBuf, std::io::Error)> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Err(e) = may(&dir, libc::R_OK | libc::X_OK) {
            return Some((dir, e));
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => return Some((dir, e)),
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => {
                    if let Err(e) = may(&path, libc::R_OK) {
                        return Some((path, e));
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Warns about what the user switched to cannot read: the reloads (or a
/// preview's rebuilds) that need it would fail. `switched`: kiln started
/// as root and switched, so serving as root is the other fix.
fn warn_unreachable(plan: &Plan, switched: bool) {
    let files = plan
        .files_read_again
        .iter()
        .filter_map(|f| may(f, libc::R_OK).err().map(|e| (f.clone(), e)));
    let trees = plan
        .trees_read_again
        .iter()
        .filter_map(|d| first_unreadable(d));
    for (path, e) in files.chain(trees) {
        let user = &plan.identity.name;
        let or_root = if switched {
            " or serve as root (--user root)"
        } else {
            ""
        };
        tracing::warn!(
            "sandbox: user {user} cannot read {} ({e}): reloads and rebuilds that need it will fail; \
             let {user} read it (chmod -R o+rX {0}, or a group of {user}){or_root}",
            path.display()
        );
    }
}

/// Logs how much of the Landlock domain this kernel enforces.
fn log_landlock(status: &landlock::RestrictionStatus) {
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi: Some(kernel),
        } => format!("ABI {effective_abi} (kernel ABI {kernel})"),
        LandlockStatus::Available { effective_abi, .. } => format!("ABI {effective_abi}"),
        LandlockStatus::NotEnabled => "not enabled in this kernel".to_owned(),
        LandlockStatus::NotImplemented => "not built into this kernel".to_owned(),
    };
    match status.ruleset {
        RulesetStatus::FullyEnforced => {
            tracing::info!("sandbox: Landlock {abi}: fully enforced")
        }
        RulesetStatus::PartiallyEnforced => tracing::info!(
            "sandbox: Landlock {abi}: partially enforced (kiln asks for ABI {LANDLOCK_ABI}'s rights)"
        ),
        RulesetStatus::NotEnforced => tracing::warn!(
            "sandbox: Landlock {abi}: not enforced; files are guarded by the user switch and the system call filter alone"
        ),
    }
}

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
/// naming it and ends the process; async-signal-safe (write and _exit only,
/// both on the list).
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

/// Installs [`on_denied_syscall`] for SIGSYS.
fn install_sigsys_handler() -> anyhow::Result<()> {
    // SAFETY: a zeroed sigaction with the handler, flags and an empty mask.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_denied_syscall as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
            bail!(
                "sandbox: cannot handle SIGSYS: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Enters the sandbox `plan` describes; every other thread must have been
/// joined (it waits for them to be gone), and every thread the caller
/// starts afterwards is inside too.
pub fn enter(plan: &Plan) -> anyhow::Result<()> {
    wait_until_single_threaded()?;
    let program = seccomp_program(plan.backend)?;
    let ruleset = landlock_ruleset(plan)?;
    // SAFETY: a plain getter.
    let switched = unsafe { libc::geteuid() } == 0 && plan.identity.uid != 0;
    switch_user(&plan.identity)?;
    warn_unreachable(plan, switched);
    // SAFETY: plain prctl; the result is checked.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        bail!(
            "sandbox: cannot set no_new_privs: {}",
            std::io::Error::last_os_error()
        );
    }
    let status = ruleset
        .restrict_self()
        .map_err(|e| anyhow!("sandbox: Landlock: {e}"))?;
    log_landlock(&status);
    install_sigsys_handler()?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| anyhow!("sandbox: cannot install the system call filter: {e}"))?;
    tracing::info!(
        "sandbox: running as {} (uid {}) without capabilities; {} system calls allowed ({:?} back end)",
        plan.identity.name,
        plan.identity.uid,
        allowed_syscalls(plan.backend).len(),
        plan.backend
    );
    Ok(())
}

/// Test hook, compiled into debug builds only: with
/// `KILN_DEBUG_EXITING_THREAD_MS=N`, a thread that ends N ms later is left
/// running when the sandbox is entered, as a joined build thread still
/// finishing its exit in the kernel is on a busy machine, at will.
#[cfg(debug_assertions)]
pub fn debug_exiting_thread() {
    let Some(ms) = std::env::var("KILN_DEBUG_EXITING_THREAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("kiln-exiting".into())
        .spawn(move || std::thread::sleep(Duration::from_millis(ms)));
}

/// Test hooks, compiled into debug builds only (the integration tests run
/// the debug binary): after the sandbox is up, a new thread opens each path
/// of `KILN_DEBUG_SANDBOX_OPEN` (`:`-separated) and logs the outcome, then
/// executes `KILN_DEBUG_SANDBOX_EXEC`, a system call the filter refuses.
#[cfg(debug_assertions)]
pub fn debug_probes() {
    let probe = || {
        if let Some(paths) = std::env::var_os("KILN_DEBUG_SANDBOX_OPEN") {
            for path in std::env::split_paths(&paths) {
                match std::fs::File::open(&path) {
                    Ok(_) => tracing::info!("debug probe: opened {}", path.display()),
                    Err(e) => tracing::info!("debug probe: cannot open {}: {e}", path.display()),
                }
            }
        }
        if let Some(program) = std::env::var_os("KILN_DEBUG_SANDBOX_EXEC")
            && let Ok(program) = CString::new(program.as_bytes())
        {
            let argv = [program.as_ptr(), std::ptr::null()];
            // SAFETY: a valid path and a NULL-terminated argv.
            unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
            tracing::info!(
                "debug probe: cannot execute {}: {}",
                program.to_string_lossy(),
                std::io::Error::last_os_error()
            );
        }
    };
    if let Ok(thread) = std::thread::Builder::new()
        .name("kiln-probe".into())
        .spawn(probe)
    {
        let _ = thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECURITY_DOC: &str = include_str!("../../docs/security.md");

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

    #[test]
    fn a_symlinked_file_is_read_from_both_folders() {
        let dir = tempfile::tempdir().unwrap();
        let (named, target) = (dir.path().join("named"), dir.path().join("target"));
        std::fs::create_dir_all(&named).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("site.pack"), b"").unwrap();
        std::os::unix::fs::symlink(target.join("site.pack"), named.join("site.pack")).unwrap();
        let folders = folders_of(&named.join("site.pack"));
        assert_eq!(
            folders,
            [named, std::fs::canonicalize(&target).unwrap()],
            "{folders:?}"
        );
        assert_eq!(folders_of(Path::new("site.pack"))[0], Path::new("."));
    }
}
