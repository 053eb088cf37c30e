//! An interrupted `kiln build` (SIGINT, SIGTERM, SIGHUP: Ctrl-C, a stop, a
//! closed terminal) leaves nothing beside the target: the pack is written
//! to an unnamed file. Where the named fallback is used instead (forced
//! here by the debug builds' `KILN_DEBUG_NAMED_TEMP`), a later build removes
//! the strays it recognises: its own name pattern for that target, not
//! locked by a running build, and unwritten for a minute.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Longer than the build's own `STRAY_AGE`.
const OLD: Duration = Duration::from_secs(3600);

/// A `kiln build` command whose fatal signals have their default action,
/// whatever the test runner ignores (a shell's background job ignores
/// SIGINT, and an ignored signal stays ignored across `exec`).
fn kiln_build(src: &Path, out: &Path, named_temp: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.arg("build").arg(src).arg("-o").arg(out);
    if named_temp {
        cmd.env("KILN_DEBUG_NAMED_TEMP", "1");
    }
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run kiln")
}

/// A site large enough that a build at maximum compression runs for many
/// seconds: 64 files of 256 KiB of pseudo-random words.
fn large_site(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..64 {
        let mut text = String::with_capacity(256 << 10);
        while text.len() < 256 << 10 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let len = 2 + (state >> 60) as usize % 8;
            for k in 0..len {
                text.push((b'a' + ((state >> (k * 5)) % 12) as u8) as char);
            }
            text.push(' ');
        }
        std::fs::write(root.join(format!("p{i}.html")), text).unwrap();
    }
}

fn small_site(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("index.html"), "home").unwrap();
}

/// The file `pid` writes in `dir` once it holds more than `min` bytes (a
/// regular file, not `dir` itself): the target of its descriptor (`/dir/#INODE (deleted)` for an unnamed file).
fn writing(child: &mut Child, dir: &Path, min: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    while Instant::now() < deadline {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the build ended before it was interrupted"
        );
        for fd in std::fs::read_dir(&fds).into_iter().flatten().flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            // A file: the build also holds the folder itself open at
            // times (to clear strays, to fsync a rename), and a folder's
            // size is never 0.
            if target.starts_with(dir)
                && std::fs::metadata(fd.path()).is_ok_and(|m| m.is_file() && m.len() > min)
            {
                return target.display().to_string();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "the build wrote no {min} bytes in {} in time",
        dir.display()
    );
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn age(path: &Path, by: Duration) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - by)
        .unwrap();
}

/// Starts a build of a large site into `out`, waits until it has written
/// a megabyte of its pack, and sends it `sig`; what it was writing.
fn interrupt(src: &Path, out: &Path, named_temp: bool, sig: i32) -> String {
    let mut child = kiln_build(src, out, named_temp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let file = writing(&mut child, out.parent().unwrap(), 1 << 20);
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    file
}

#[test]
fn an_interrupted_build_leaves_nothing_beside_the_pack() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    large_site(&src);
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        let out_dir = dir.path().join(name);
        std::fs::create_dir(&out_dir).unwrap();
        let file = interrupt(&src, &out_dir.join("s.pack"), false, sig);
        assert!(file.ends_with("(deleted)"), "{name}: wrote {file}");
        assert_eq!(names(&out_dir), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn a_stray_of_the_named_fallback_is_removed_by_a_later_build() {
    let dir = tempfile::tempdir().unwrap();
    let (large, small) = (dir.path().join("large"), dir.path().join("small"));
    large_site(&large);
    small_site(&small);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("s.pack");
    let file = interrupt(&large, &out, true, libc::SIGTERM);
    let stray = PathBuf::from(&file);
    assert_eq!(stray.parent(), Some(out_dir.as_path()), "{file}");
    assert!(stray.exists(), "{file}");

    // Just interrupted: it might be a build that is only pausing.
    let o = run(&mut kiln_build(&small, &out, false));
    assert!(o.status.success(), "{o:?}");
    assert!(stray.exists());

    age(&stray, OLD);
    let o = run(&mut kiln_build(&small, &out, false));
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "kiln: note: {file}: removed, the temporary file of an interrupted build"
        )),
        "{err}"
    );
    assert_eq!(names(&out_dir), ["s.pack"]);
}

#[test]
fn only_unlocked_old_files_of_the_target_s_pattern_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    small_site(&src);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let create = |name: &str, old: bool| {
        let path = out_dir.join(name);
        std::fs::write(&path, "partial pack").unwrap();
        if old {
            age(&path, OLD);
        }
        path
    };
    let stray = create(".s.pack.aB3xYz.tmp", true);
    let locked = create(".s.pack.L0cked.tmp", true);
    let young = create(".s.pack.Young1.tmp", false);
    let kept = [
        create(".other.pack.aB3xYz.tmp", true),
        create(".s.pack.short.tmp", true),
        create(".s.pack.aB3xYz.tmp~", true),
        create("s.pack.aB3xYz.tmp", true),
    ];
    let holder = File::open(&locked).unwrap();
    // SAFETY: flock(2) on our descriptor; the lock is a running build's.
    assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);

    let o = run(&mut kiln_build(&src, &out_dir.join("s.pack"), false));
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("removed").count(), 1, "{err}");
    assert!(err.contains(&stray.display().to_string()), "{err}");
    assert!(!stray.exists());
    for path in [&locked, &young].into_iter().chain(&kept) {
        assert!(path.exists(), "{} was removed", path.display());
    }
    drop(holder);
}

#[test]
fn a_running_build_s_file_is_not_removed_by_a_concurrent_one() {
    let dir = tempfile::tempdir().unwrap();
    let (large, small) = (dir.path().join("large"), dir.path().join("small"));
    large_site(&large);
    small_site(&small);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("s.pack");
    let mut first = kiln_build(&large, &out, true)
        .arg("--compression")
        .arg("fast")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let file = PathBuf::from(writing(&mut first, &out_dir, 0));
    // A build that writes nothing for a long time (stopped meanwhile, and
    // its file as old as a stray's), but holds its lock.
    let signal = |sig| {
        // SAFETY: kill(2) on our child.
        assert_eq!(unsafe { libc::kill(first.id() as i32, sig) }, 0);
    };
    signal(libc::SIGSTOP);
    age(&file, OLD);
    let o = run(&mut kiln_build(&small, &out, false));
    signal(libc::SIGCONT);
    assert!(o.status.success(), "{o:?}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("removed"),
        "{o:?}"
    );
    assert!(file.exists(), "the running build's file was removed");
    // Its rename would fail had its file been removed.
    assert!(first.wait().unwrap().success());
    let pack = kiln::pack::Pack::open(&out).unwrap();
    assert!(
        pack.lookup(kiln::pack::RouteKind::Exact, b"/p0.html")
            .is_some(),
        "not the first build's pack"
    );
}
