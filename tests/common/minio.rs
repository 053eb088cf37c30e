//! MinIO, a real S3-compatible server, on loopback for the store tests
//! (`store.rs`): each test starts its own on a free port with a
//! temporary data folder, and makes the bucket. A test skips, saying so,
//! where MinIO is not installed (`./test` installs it with `go install`).
//! Objects the tests write behind kiln's back (corrupt, truncated) and
//! deletions go through `curl --aws-sigv4`, not kiln's client.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USER: &str = "kilntest";
pub const PASSWORD: &str = "kilntest-secret";
pub const BUCKET: &str = "sites";

/// How long MinIO may take to start on a busy machine.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// How long a test waits for the MinIO build `./test` started beside
/// the suite (niced: it gets what the suite leaves idle; two whole suites
/// side by side on 2 cores left it so little that 900 s from the start
/// were not enough, so `./test` gives it 1,500 s and the tests, which
/// start some 1,000 s in, wait this long for its end).
const BUILD_PATIENCE: Duration = Duration::from_secs(20 * 60);

/// The MinIO binary `./test` is building in the background into
/// `$KILN_TEST_MINIO_BUILD`, once the build has ended (its `.done` file
/// holds go's exit status); `None` without such a build.
fn built_by_test() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("KILN_TEST_MINIO_BUILD")?);
    let started = Instant::now();
    let status = loop {
        if let Ok(status) = std::fs::read_to_string(dir.join(".done")) {
            break status;
        }
        if started.elapsed() > BUILD_PATIENCE {
            break "still running".to_string();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let binary = dir.join("minio");
    if status.trim() == "0" && binary.is_file() {
        return Some(binary);
    }
    eprintln!(
        "skipped: the MinIO build ./test started did not give a binary (status {}; see {})",
        status.trim(),
        dir.join("log").display()
    );
    None
}

/// The MinIO binary: the one `./test` builds, else on PATH, else in
/// $GOPATH/bin or ~/go/bin.
pub fn binary() -> Option<PathBuf> {
    if std::env::var_os("KILN_TEST_MINIO_BUILD").is_some() {
        return built_by_test();
    }
    let found = super::go_tool("minio");
    if found.is_none() {
        eprintln!(
            "skipped: minio is not installed (go install github.com/minio/minio@VERSION, \
             as ./test does)"
        );
    }
    found
}

/// A MinIO server; killed on drop.
pub struct Minio {
    binary: PathBuf,
    pub port: u16,
    data: tempfile::TempDir,
    child: Option<Child>,
}

impl Minio {
    /// Starts MinIO and makes the bucket; `None` (said on stderr) when
    /// MinIO is not installed.
    pub fn start() -> Option<Minio> {
        let binary = binary()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut minio = Minio {
            binary,
            port,
            data: tempfile::tempdir().unwrap(),
            child: None,
        };
        minio.resume();
        let status = minio.curl(&["-X", "PUT"], BUCKET);
        assert!(status.starts_with("200"), "making the bucket: {status}");
        Some(minio)
    }

    /// The endpoint, for `--store-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment kiln reads its credentials from.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", USER.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", PASSWORD.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ]
    }

    /// `kiln publish PACK s3://sites/KEY` with this server's endpoint and
    /// credentials, which must succeed; what it printed.
    pub fn publish(&self, pack: &Path, key: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("publish")
            .arg(pack)
            .arg(format!("s3://{BUCKET}/{key}"))
            .args(["--store-endpoint", &self.endpoint()])
            .envs(self.env())
            .output()
            .expect("run kiln publish");
        assert!(
            out.status.success(),
            "publish {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops the server (its data stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let asked = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if asked.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the server (again) on the same port and data, and waits
    /// until it is ready.
    pub fn resume(&mut self) {
        let child = Command::new(&self.binary)
            .args(["server", self.data.path().to_str().unwrap(), "--quiet"])
            .args(["--address", &format!("127.0.0.1:{}", self.port)])
            .args(["--console-address", "127.0.0.1:0"])
            .env("MINIO_ROOT_USER", USER)
            .env("MINIO_ROOT_PASSWORD", PASSWORD)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start minio");
        self.child = Some(child);
        // Ready when a signed request (the list of buckets) is answered:
        // the health check says 200 a little before MinIO is initialised
        // (`XMinioServerNotInitialized`, 503).
        let started = Instant::now();
        loop {
            if self.curl(&[], "").starts_with("200") {
                return;
            }
            assert!(
                started.elapsed() < START_PATIENCE,
                "minio not ready after {START_PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `curl --aws-sigv4` on `key` of the bucket (or the bucket itself);
    /// the status code and body.
    fn curl(&self, args: &[&str], key: &str) -> String {
        let url = format!("{}/{key}", self.endpoint());
        let out = Command::new("curl")
            .args([
                "-s",
                "-w",
                "%{http_code}",
                "--aws-sigv4",
                "aws:amz:us-east-1:s3",
            ])
            .args(["--user", &format!("{USER}:{PASSWORD}")])
            .args(args)
            .arg(&url)
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // The code is written last: put it first.
        let (body, code) = text.split_at(text.len().saturating_sub(3));
        format!("{code} {body}")
    }

    /// Writes `file` as the object `key` of the bucket, as it is (no check).
    pub fn put_raw(&self, key: &str, file: &Path) {
        let file = file.to_str().unwrap();
        let status = self.curl(&["--upload-file", file], &format!("{BUCKET}/{key}"));
        assert!(status.starts_with("200"), "PUT {key}: {status}");
    }

    /// Whether the object `key` is there.
    pub fn exists(&self, key: &str) -> bool {
        self.curl(&["--head"], &format!("{BUCKET}/{key}"))
            .starts_with("200")
    }

    /// Deletes the object `key`.
    pub fn delete(&self, key: &str) {
        let status = self.curl(&["-X", "DELETE"], &format!("{BUCKET}/{key}"));
        assert!(status.starts_with("204"), "DELETE {key}: {status}");
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
