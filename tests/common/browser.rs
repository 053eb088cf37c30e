//! Headless Chromium, driven by Playwright (`tests/browser/load_site.mjs`),
//! for the tests that load pages in a real browser: finding the browser,
//! Node and playwright-core (a test without them skips itself, saying so),
//! and one run of the script.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::Value;

/// How long the browser run may take before it is killed; the script
/// gives up on its own a little earlier, with a report.
const BROWSER_DEADLINE: Duration = Duration::from_secs(60);

const BROWSER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser");

/// `name` in a directory of `PATH`, if it is an executable file there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| {
            path.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The names Chromium is installed under by distributions and by Google.
pub fn find_chromium() -> Option<PathBuf> {
    [
        "chromium",
        "chromium-browser",
        "google-chrome-stable",
        "google-chrome",
    ]
    .into_iter()
    .find_map(on_path)
}

/// Node and Chromium, when this machine has them and playwright-core is
/// installed (`./test` installs it); else `None`, said on stderr.
pub fn find() -> Option<(PathBuf, PathBuf)> {
    let Some(chromium) = find_chromium() else {
        eprintln!("skipped: no Chromium on PATH (./test installs it as root)");
        return None;
    };
    let Some(node) = on_path("node") else {
        eprintln!("skipped: no node on PATH");
        return None;
    };
    if !Path::new(BROWSER_DIR)
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        eprintln!("skipped: playwright-core is not installed (npm ci --prefix tests/browser)");
        return None;
    }
    Some((node, chromium))
}

/// How a run treats the server's certificate.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Certificates {
    /// Any certificate is taken (a self-signed one).
    Ignored,
    /// Checked as a browser checks it: trusted only through the run's
    /// Chromium flags (`--ignore-certificate-errors-spki-list`).
    Verified,
}

/// Runs the Playwright script and returns its JSON report; panics, with
/// what the script wrote to stderr, if it fails or outlives the deadline.
/// `chromium_args`: extra browser flags, one per line.
pub fn run_browser(
    node: &Path,
    chromium: &Path,
    chromium_args: &str,
    certificates: Certificates,
    base: &str,
    pages: &[String],
) -> Value {
    let verify = if certificates == Certificates::Verified {
        "1"
    } else {
        "0"
    };
    let mut args = vec![chromium.display().to_string(), base.to_owned()];
    args.extend_from_slice(pages);
    run_script(
        node,
        "load_site.mjs",
        &args,
        &[
            ("CHROMIUM_ARGS", chromium_args.to_owned()),
            ("VERIFY_CERTIFICATES", verify.to_owned()),
        ],
    )
}

/// Runs `script` of `tests/browser` with `args` and `env` and returns the
/// JSON report it prints last; panics, with what it wrote to stderr, if it
/// fails, reports an error or outlives the deadline.
pub fn run_script(node: &Path, script: &str, args: &[String], env: &[(&str, String)]) -> Value {
    let mut child = Command::new(node)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg(script)
        .args(args)
        .current_dir(BROWSER_DIR)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node");
    // Read both pipes while waiting: a full pipe would stall the script.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > BROWSER_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the browser run took over {BROWSER_DEADLINE:?}; stderr:\n{}",
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(
        status.success(),
        "node exited with {status}; stderr:\n{stderr}"
    );
    let line = stdout.lines().rfind(|l| !l.trim().is_empty());
    let report: Value = line
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON report; stdout:\n{stdout}\nstderr:\n{stderr}"));
    assert!(
        report["error"].is_null(),
        "the browser run failed: {}\nstderr:\n{stderr}",
        report["error"].as_str().unwrap_or_default()
    );
    report
}

/// The base64 SHA-256 of the public key of every certificate of a PEM
/// file: what `--ignore-certificate-errors-spki-list` takes.
pub fn spki_hashes(path: &Path) -> Vec<String> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .map(|der| {
            let der = der.unwrap();
            let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
            let spki = cert.tbs_certificate.subject_pki.raw;
            super::base64(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spki).as_ref())
        })
        .collect()
}
