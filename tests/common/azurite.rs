//! Azurite, Microsoft's Azure Blob Storage emulator, on loopback for
//! tests/store_azure.rs: each test starts its own (in memory, on a free
//! port) and makes the container. A test skips, saying so, where Azurite
//! is not installed (`./test` installs it with `npm ci --prefix
//! tests/azurite`). The container is made and blobs deleted by requests
//! signed here with the account's Shared Key, not through kiln's client.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The emulator's well-known account and key (documented by Microsoft).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
pub const CONTAINER: &str = "sites";

/// How long Azurite may take to start on a busy machine.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// The `azurite-blob` script `npm ci --prefix tests/azurite` installs.
fn binary() -> Option<PathBuf> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/azurite/node_modules/.bin/azurite-blob");
    if script.is_file() {
        return Some(script);
    }
    eprintln!("skipped: Azurite is not installed (npm ci --prefix tests/azurite, as ./test does)");
    None
}

/// An Azurite blob server; killed on drop.
pub struct Azurite {
    pub port: u16,
    child: Child,
}

impl Azurite {
    /// Starts Azurite and makes the container; `None` (said on stderr)
    /// when it is not installed.
    pub fn start() -> Option<Azurite> {
        let script = binary()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(script)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--inMemoryPersistence", "--silent", "--skipApiVersionCheck"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start azurite");
        let azurite = Azurite { port, child };
        let started = Instant::now();
        loop {
            match azurite.request("PUT", &format!("{CONTAINER}?restype=container")) {
                Some(201) => return Some(azurite),
                Some(status) => panic!("making the container: {status}"),
                None => {}
            }
            assert!(
                started.elapsed() < START_PATIENCE,
                "azurite not ready after {START_PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The account's blob endpoint, for `--store-endpoint` (path-style,
    /// as the emulator serves it).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.port)
    }

    /// The environment kiln reads its credentials from.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT.to_owned()),
            ("AZURE_STORAGE_ACCOUNT_KEY", KEY.to_owned()),
        ]
    }

    /// Deletes the blob `key` of the container.
    pub fn delete(&self, key: &str) {
        let status = self.request("DELETE", &format!("{CONTAINER}/{key}"));
        assert_eq!(status, Some(202), "DELETE {key}");
    }

    /// A bodiless request on `resource` (below the account, with its
    /// query), signed with the Shared Key; its status, `None` when the
    /// server is not listening yet.
    fn request(&self, method: &str, resource: &str) -> Option<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        let date = httpdate();
        let version = "2021-08-06";
        let (path, query) = resource.split_once('?').unwrap_or((resource, ""));
        // The canonicalized resource: the account, then the URL's path
        // (which, path-style, starts with the account again), then each
        // query parameter as `name:value` on its own line.
        let mut canonical = format!("/{ACCOUNT}/{ACCOUNT}/{path}");
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap();
            canonical.push_str(&format!("\n{name}:{value}"));
        }
        let to_sign = format!(
            "{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{canonical}"
        );
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &base64_decode(KEY));
        let signature = super::base64(aws_lc_rs::hmac::sign(&key, to_sign.as_bytes()).as_ref());
        let request = format!(
            "{method} /{ACCOUNT}/{resource} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\
             x-ms-date: {date}\r\nx-ms-version: {version}\r\n\
             Authorization: SharedKey {ACCOUNT}:{signature}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        response.split(' ').nth(1)?.parse().ok()
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut n, mut bits) = (0u32, 0);
    for c in text.bytes().take_while(|&c| c != b'=') {
        let value = BASE64.iter().position(|&b| b == c).expect("base64") as u32;
        n = n << 6 | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
        }
    }
    out
}

/// Now as an HTTP date (RFC 9110 IMF-fixdate), as Shared Key signs it.
fn httpdate() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut out = [0u8; 29];
    kiln::httpdate::format_imf(now as i64, &mut out);
    String::from_utf8(out.to_vec()).unwrap()
}
