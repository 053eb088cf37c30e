//! Compression Dictionary Transport (RFC 9842) over real sockets: version
//! 2 of a site is built against version 1's pack, and a client holding
//! version 1's script (named by its SHA-256 in `Available-Dictionary`)
//! gets version 2 as a `dcb` or `dcz` delta, which the test decodes with
//! the old file as the dictionary. Every other request gets the plain
//! variant: a wrong hash, no `dcb`/`dcz` in `Accept-Encoding`, a
//! cross-site no-cors fetch of a response other origins may not read, a
//! malformed or repeated field. The dictionary headers are on the right
//! routes; HEAD and Range behave as for any variant. Over HTTP/1.1 (TLS
//! with `KILN_TEST_TLS=1`) and HTTP/2 (h2c, and h2 over TLS), by curl.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, curl_has_http2};
use kiln::build::compress::{CompressOptions, Level};
use kiln::build::{Base, BuildOptions, build_pack};
use kiln::dictionary::{available_dictionary_value, decode, sha256};
use kiln::pack::Encoding;

/// A script of `n` functions, version `v`: most lines shared between
/// versions.
fn script(v: u32, n: u32) -> String {
    (0..n)
        .map(|i| {
            let body = if i % 97 == 0 { v * 1000 + i } else { i * 7 };
            format!("export function f{i}(a, b) {{ return a * {body} + b - {i}; }}\n")
        })
        .collect()
}

/// The two versions of the site and their packs, version 2 built against
/// version 1.
struct Sites {
    _dir: tempfile::TempDir,
    v2_pack: PathBuf,
    old_app: Vec<u8>,
    new_app: Vec<u8>,
    old_cors: Vec<u8>,
}

const NEW_APP: &str = "/assets/app.77aa88bb.js";
const NEW_CORS: &str = "/assets/shared.5e6f7a8b.js";

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn sites() -> Sites {
    let dir = tempfile::tempdir().unwrap();
    let headers = "/assets/shared.*\n  Access-Control-Allow-Origin: *\n\
                   /plain.js\n  Use-As-Dictionary: off\n";
    for (v, app, cors) in [
        (1, "assets/app.3f2a9b1c.js", "assets/shared.1a2b3c4d.js"),
        (2, "assets/app.77aa88bb.js", "assets/shared.5e6f7a8b.js"),
    ] {
        let root = dir.path().join(format!("v{v}"));
        write(&root, app, script(v, 800).as_bytes());
        write(&root, cors, script(v + 10, 600).as_bytes());
        write(&root, "plain.js", script(v, 300).as_bytes());
        write(
            &root,
            "index.html",
            "<p>hello</p>\n".repeat(20 + v as usize).as_bytes(),
        );
        write(&root, "logo.png", &[0x89, b'P', b'N', b'G', 0, 1, 2, 3]);
        write(&root, "_headers", headers.as_bytes());
    }
    let opts = BuildOptions {
        compress: CompressOptions::at(Level::Fast),
        ..BuildOptions::default()
    };
    let v1_pack = dir.path().join("v1.pack");
    build_pack(&dir.path().join("v1"), &v1_pack, &opts).unwrap();
    let v2_pack = dir.path().join("v2.pack");
    let report = build_pack(
        &dir.path().join("v2"),
        &v2_pack,
        &BuildOptions {
            base: Base::Packs(vec![v1_pack]),
            ..opts
        },
    )
    .unwrap();
    assert!(report.per_encoding[Encoding::Dcb as usize].count >= 2);
    Sites {
        v2_pack,
        old_app: script(1, 800).into_bytes(),
        new_app: script(2, 800).into_bytes(),
        old_cors: script(11, 600).into_bytes(),
        _dir: dir,
    }
}

/// One response as any protocol gives it.
struct Got {
    status: u16,
    /// Header lines, names lowercased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn encoding(&self) -> &str {
        self.header("content-encoding").unwrap_or("identity")
    }
}

/// How a request is sent.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    /// The test's own HTTP/1.1 client (over TLS in TLS mode).
    Http1,
    /// curl with HTTP/2: h2c, or h2 over TLS.
    Http2 { tls: bool },
}

/// The protocols this run can speak to `server`.
fn protocols(server: &Server) -> Vec<Protocol> {
    let mut out = vec![Protocol::Http1];
    if curl_has_http2() {
        out.push(Protocol::Http2 { tls: false });
        if server.tls_port.is_some() {
            out.push(Protocol::Http2 { tls: true });
        }
    } else {
        eprintln!("curl without HTTP/2: HTTP/2 cases skipped");
    }
    out
}

/// `method path` with `headers` (each `Name: value`).
fn fetch(server: &Server, protocol: Protocol, method: &str, path: &str, headers: &[&str]) -> Got {
    match protocol {
        Protocol::Http1 => {
            let lines: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
            let r = server.request(method, path, &lines);
            Got {
                status: r.status,
                headers: r
                    .head
                    .lines()
                    .skip(1)
                    .filter_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        Some((n.to_ascii_lowercase(), v.trim().to_owned()))
                    })
                    .collect(),
                body: r.body,
            }
        }
        Protocol::Http2 { tls } => {
            let body = tempfile::NamedTempFile::new().unwrap();
            let url = match tls {
                false => format!("http://127.0.0.1:{}{path}", server.port),
                true => format!("https://127.0.0.1:{}{path}", server.tls_port.unwrap()),
            };
            let mut cmd = Command::new("curl");
            cmd.args(["-sS", "-k", "--max-time", "10", "-D", "-", "-o"])
                .arg(body.path())
                .arg(if tls {
                    "--http2"
                } else {
                    "--http2-prior-knowledge"
                });
            if method == "HEAD" {
                cmd.arg("-I");
            }
            for h in headers {
                cmd.args(["-H", h]);
            }
            let out = cmd.arg(&url).output().expect("curl");
            assert!(out.status.success(), "curl {url}: {out:?}");
            let head = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(head.starts_with("HTTP/2 "), "{head}");
            Got {
                status: head[7..10].parse().unwrap(),
                headers: head
                    .lines()
                    .skip(1)
                    .filter_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        Some((n.to_ascii_lowercase(), v.trim().to_owned()))
                    })
                    .collect(),
                // With -I, curl writes the head to the file too.
                body: match method {
                    "HEAD" => Vec::new(),
                    _ => std::fs::read(body.path()).unwrap(),
                },
            }
        }
    }
}

const ALL: &str = "Accept-Encoding: gzip, deflate, br, zstd, dcb, dcz";

fn holding(old: &[u8]) -> String {
    format!(
        "Available-Dictionary: {}",
        available_dictionary_value(&sha256(old))
    )
}

#[test]
fn dictionary_headers_are_on_the_right_routes() {
    let sites = sites();
    let s = Server::start(&[sites.v2_pack.to_str().unwrap()]);
    for protocol in protocols(&s) {
        let app = fetch(&s, protocol, "GET", NEW_APP, &[ALL]);
        let dict = app.header("use-as-dictionary").unwrap_or_default();
        assert!(
            dict.starts_with(r#"match="/assets/app.*.js", id="kiln-"#),
            "{protocol:?}: {dict}"
        );
        assert_eq!(
            app.header("vary"),
            Some("Accept-Encoding, Available-Dictionary"),
            "{protocol:?}"
        );
        let page = fetch(&s, protocol, "GET", "/index.html", &[ALL]);
        assert!(
            page.header("use-as-dictionary")
                .is_some_and(|v| v.starts_with(r#"match="/index.html", id="kiln-"#)),
            "{protocol:?}"
        );
        let root = fetch(&s, protocol, "GET", "/", &[ALL]);
        assert!(
            root.header("use-as-dictionary")
                .is_some_and(|v| v.starts_with(r#"match="/", id="#)),
            "{protocol:?}"
        );
        for path in ["/logo.png", "/plain.js"] {
            let r = fetch(&s, protocol, "GET", path, &[ALL]);
            assert_eq!(r.status, 200);
            assert_eq!(r.header("use-as-dictionary"), None, "{protocol:?} {path}");
        }
        // No delta: the plain Vary.
        assert_eq!(
            fetch(&s, protocol, "GET", "/plain.js", &[ALL]).header("vary"),
            Some("Accept-Encoding")
        );
    }
}

#[test]
fn a_client_holding_the_old_version_gets_a_delta_it_can_decode() {
    let sites = sites();
    let s = Server::start(&[sites.v2_pack.to_str().unwrap()]);
    let held = holding(&sites.old_app);
    for protocol in protocols(&s) {
        let plain = fetch(&s, protocol, "GET", NEW_APP, &[ALL]);
        assert_eq!(plain.encoding(), "br", "{protocol:?}");
        for (accept, wanted) in [
            ("Accept-Encoding: br, dcb", &["dcb"][..]),
            ("Accept-Encoding: br, dcz", &["dcz"][..]),
            (ALL, &["dcb", "dcz"][..]),
        ] {
            let r = fetch(&s, protocol, "GET", NEW_APP, &[accept, &held]);
            assert_eq!(r.status, 200, "{protocol:?} {accept}");
            assert!(
                wanted.contains(&r.encoding()),
                "{protocol:?} {accept}: {}",
                r.encoding()
            );
            assert!(r.body.len() * 5 < plain.body.len(), "{protocol:?}");
            assert_eq!(
                r.header("content-length"),
                Some(r.body.len().to_string().as_str())
            );
            assert_ne!(r.header("etag"), plain.header("etag"));
            let encoding = if r.encoding() == "dcb" {
                Encoding::Dcb
            } else {
                Encoding::Dcz
            };
            let decoded = decode(encoding, &sites.old_app, &r.body, 1 << 20).unwrap();
            assert_eq!(decoded, sites.new_app, "{protocol:?} {accept}");
        }
    }
}

#[test]
fn other_requests_get_the_plain_variant() {
    let sites = sites();
    let s = Server::start(&[sites.v2_pack.to_str().unwrap()]);
    let held = holding(&sites.old_app);
    let hash = available_dictionary_value(&sha256(&sites.old_app));
    let inner = &hash[1..hash.len() - 1];
    let wrong = holding(b"another file");
    let malformed = [
        format!("Available-Dictionary: {inner}"),
        format!("Available-Dictionary: \"{inner}\""),
        format!("Available-Dictionary: :{}:", &inner[..40]),
        format!("Available-Dictionary: {hash};x=1"),
        "Available-Dictionary: :!!!!:".to_owned(),
        "Available-Dictionary: ".to_owned(),
    ];
    for protocol in protocols(&s) {
        let mut cases: Vec<(&str, Vec<&str>)> = vec![
            ("wrong hash", vec![ALL, &wrong]),
            (
                "no dcb or dcz",
                vec!["Accept-Encoding: gzip, br, zstd", &held],
            ),
            ("dcb refused", vec!["Accept-Encoding: br, dcb;q=0", &held]),
            ("no field", vec![ALL]),
            (
                "cross-site no-cors",
                vec![
                    ALL,
                    &held,
                    "Sec-Fetch-Site: cross-site",
                    "Sec-Fetch-Mode: no-cors",
                ],
            ),
        ];
        for m in &malformed {
            cases.push(("malformed", vec![ALL, m]));
        }
        if let Protocol::Http1 = protocol {
            // Two fields: RFC 9842 sends one (curl would join them).
            cases.push(("twice", vec![ALL, &held, &held]));
        }
        for (why, headers) in &cases {
            let r = fetch(&s, protocol, "GET", NEW_APP, headers);
            assert_eq!(
                (r.status, r.encoding()),
                (200, "br"),
                "{protocol:?} {why}: {headers:?}"
            );
        }
        // The fetches a page may read get the delta.
        for (site, mode) in [
            ("same-origin", "no-cors"),
            ("cross-site", "cors"),
            ("same-origin", "navigate"),
        ] {
            let site = format!("Sec-Fetch-Site: {site}");
            let mode = format!("Sec-Fetch-Mode: {mode}");
            let r = fetch(&s, protocol, "GET", NEW_APP, &[ALL, &held, &site, &mode]);
            assert!(r.encoding().starts_with("dc"), "{protocol:?} {site} {mode}");
        }
        // A response any origin may read gets it cross-site too.
        let r = fetch(
            &s,
            protocol,
            "GET",
            NEW_CORS,
            &[
                ALL,
                &holding(&sites.old_cors),
                "Sec-Fetch-Site: cross-site",
                "Sec-Fetch-Mode: no-cors",
            ],
        );
        assert!(r.encoding().starts_with("dc"), "{protocol:?}");
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    }
}

#[test]
fn head_and_range_answer_for_the_delta() {
    let sites = sites();
    let s = Server::start(&[sites.v2_pack.to_str().unwrap()]);
    let held = holding(&sites.old_app);
    for protocol in protocols(&s) {
        let full = fetch(&s, protocol, "GET", NEW_APP, &[ALL, &held]);
        let head = fetch(&s, protocol, "HEAD", NEW_APP, &[ALL, &held]);
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        for field in ["content-encoding", "content-length", "etag", "vary"] {
            assert_eq!(
                head.header(field),
                full.header(field),
                "{protocol:?} {field}"
            );
        }
        let etag = full.header("etag").unwrap().to_owned();
        let part = fetch(
            &s,
            protocol,
            "GET",
            NEW_APP,
            &[ALL, &held, "Range: bytes=4-39"],
        );
        assert_eq!(part.status, 206, "{protocol:?}");
        assert_eq!(part.encoding(), full.encoding());
        assert_eq!(part.header("etag"), Some(etag.as_str()));
        assert_eq!(
            part.header("content-range"),
            Some(format!("bytes 4-39/{}", full.body.len()).as_str())
        );
        assert_eq!(part.body, full.body[4..40]);
        // If-Range with the delta's own ETag holds; with another, the
        // whole delta.
        let if_range = format!("If-Range: {etag}");
        let held_range = fetch(
            &s,
            protocol,
            "GET",
            NEW_APP,
            &[ALL, &held, "Range: bytes=0-9", &if_range],
        );
        assert_eq!(held_range.status, 206);
        let other = fetch(
            &s,
            protocol,
            "GET",
            NEW_APP,
            &[ALL, &held, "Range: bytes=0-9", "If-Range: \"other\""],
        );
        assert_eq!((other.status, other.body.len()), (200, full.body.len()));
        // A revalidation with the delta's ETag: 304, which still varies.
        let not_modified = fetch(
            &s,
            protocol,
            "GET",
            NEW_APP,
            &[ALL, &held, &format!("If-None-Match: {etag}")],
        );
        assert_eq!(not_modified.status, 304);
        assert_eq!(
            not_modified.header("vary"),
            Some("Accept-Encoding, Available-Dictionary")
        );
    }
}
