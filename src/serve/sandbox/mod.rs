//! The walls `kiln serve` runs inside. Once the listeners are bound and the
//! pack and certificates opened, and before any serving thread starts,
//! [`enter`]:
//!
//! 1. switches to an unprivileged user (`--user`; `nobody` by default when
//!    started as root) and drops every capability but CAP_LEASE (read
//!    leases on the packs a reload opens: `serve::in_place`);
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
//!
//! One file per wall: the user switch and the capabilities are
//! `crate::confine`'s (the ACME worker uses them too); `user.rs` warns
//! about what the user switched to cannot read; `landlock_domain.rs`,
//! `seccomp.rs` (the list and its filter), and `threads.rs` (the wait
//! until the process has one thread).

mod landlock_domain;
mod seccomp;
mod threads;
mod user;

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use rustix::process::geteuid;
use rustix::thread;

use self::landlock_domain::{landlock_ruleset, log_landlock};
use self::seccomp::seccomp_program;
pub use self::seccomp::{ArgTest, Syscall, allowed_syscalls};
use self::threads::wait_until_single_threaded;
use self::user::warn_unreachable;
use super::net::Backend;
pub use crate::confine::{Identity, resolve_user, switch_user};
use crate::sys;

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

/// What a path read again after start holds: the advice given when the
/// user switched to cannot read it depends on it (`user::warn_unreachable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// A pack, a certificate, a tar archive: public.
    File,
    /// A private key: never to be made readable by every user.
    PrivateKey,
    /// A folder of sites: the folder and its packs are checked, not the
    /// rest (a stray file is never read).
    FolderOfSites,
    /// A directory a preview is fired from: the preview's own build, as
    /// the serving user, says what it leaves out, so nothing is checked.
    Preview,
    /// A folder read whole (the ACME state): the first thing in it that
    /// cannot be read is named.
    Tree,
}

/// What the server may touch once the sandbox is up.
pub struct Plan {
    /// Who to run as.
    pub identity: Identity,
    /// Which event loop serves (decides the system call list).
    pub backend: Backend,
    /// Files read again after start (the pack, certificates and keys, a
    /// tar site): their folders become readable.
    files_read_again: Vec<(PathBuf, Held)>,
    /// Directories read again (a folder of sites, a directory site fired
    /// again at each reload): everything beneath is readable.
    trees_read_again: Vec<(PathBuf, Held)>,
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

    /// `file`, and any file later renamed into its folder, is read again;
    /// `held` says what it is.
    pub fn read_file_again(&mut self, file: &Path, held: Held) {
        self.files_read_again.push((file.to_path_buf(), held));
    }

    /// Every file and folder beneath `dir` is read again; `held` says what
    /// the folder is.
    pub fn read_tree_again(&mut self, dir: &Path, held: Held) {
        self.trees_read_again.push((dir.to_path_buf(), held));
    }
}

/// Enters the sandbox `plan` describes; every other thread must have been
/// joined (it waits for them to be gone), and every thread the caller
/// starts afterwards is inside too.
pub fn enter(plan: &Plan) -> anyhow::Result<()> {
    wait_until_single_threaded()?;
    let program = seccomp_program(plan.backend)?;
    let ruleset = landlock_ruleset(plan)?;
    let switched = geteuid().is_root() && plan.identity.uid != 0;
    switch_user(&plan.identity, crate::confine::lease_if_held())?;
    // Asked before the filter, which has no capget.
    let capabilities = match rustix::thread::capabilities(None) {
        Ok(sets) if !sets.effective.is_empty() => "with CAP_LEASE alone (read leases on the packs)",
        _ => "without capabilities",
    };
    warn_unreachable(plan, switched);
    thread::set_no_new_privs(true).map_err(|e| {
        anyhow!(
            "sandbox: cannot set no_new_privs: {}",
            std::io::Error::from(e)
        )
    })?;
    let status = ruleset
        .restrict_self()
        .map_err(|e| anyhow!("sandbox: Landlock: {e}"))?;
    log_landlock(&status);
    sys::exit_on_denied_syscall().map_err(|e| anyhow!("sandbox: cannot handle SIGSYS: {e}"))?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| anyhow!("sandbox: cannot install the system call filter: {e}"))?;
    tracing::info!(
        "sandbox: running as {} (uid {}) {capabilities}; {} system calls allowed ({:?} back end)",
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
        .spawn(move || std::thread::sleep(std::time::Duration::from_millis(ms)));
}

/// Test hooks, compiled into debug builds only (the integration tests run
/// the debug binary): after the sandbox is up, a new thread opens each path
/// of `KILN_DEBUG_SANDBOX_OPEN` (`:`-separated) and logs the outcome, then
/// executes `KILN_DEBUG_SANDBOX_EXEC`, a system call the filter refuses.
#[cfg(debug_assertions)]
pub fn debug_probes() {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

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
            let e = sys::execute(&program);
            tracing::info!(
                "debug probe: cannot execute {}: {e}",
                program.to_string_lossy()
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
