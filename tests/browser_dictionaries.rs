//! Compression Dictionary Transport (RFC 9842) in a real browser: headless
//! Chromium (`tests/browser/dictionaries.mjs`) loads version 1 of a site
//! from `kiln serve` on https://localhost, its certificate trusted only
//! through `--ignore-certificate-errors-spki-list` (Chromium keeps no
//! dictionary from a connection whose certificate errors it ignores);
//! kiln switches to version 2 by a pack rename; the page is loaded again,
//! and the changed script must arrive as `dcb` or `dcz` (Chromium named
//! version 1's script in `Available-Dictionary`), run, and give version
//! 2's result.
//!
//! Skipped (it passes, saying why on stderr) without Chromium, Node or
//! `tests/browser/node_modules`, as `browser_https.rs` is.

mod common;

use std::path::Path;

use common::Server;
use common::browser::{find, run_script};
use kiln::build::compress::{CompressOptions, Level};
use kiln::build::{Base, BuildOptions, build_pack};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Version `v` of the script: mostly the same functions, then the line
/// that leaves its result in the page.
fn script(v: u32) -> String {
    let mut text: String = (0..1500)
        .map(|i| {
            let k = if i % 211 == 0 { v * 100 + i } else { 3 * i + 1 };
            format!("function f{i}(a) {{ return (a * {k}) % 9973; }}\n")
        })
        .collect();
    text.push_str(&format!(
        "document.documentElement.dataset.result = 'v{v}:' + f211(2);\n"
    ));
    text
}

/// What version `v` of the script computes: `f211(2)`.
fn expected(v: u32) -> u32 {
    (2 * (v * 100 + 211)) % 9973
}

/// The SHA-256 of the SubjectPublicKeyInfo of the first certificate of a
/// PEM file, base64: what `--ignore-certificate-errors-spki-list` takes.
fn spki_hash(pem: &Path) -> String {
    let der = CertificateDer::pem_file_iter(pem)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let digest = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        cert.tbs_certificate.subject_pki.raw,
    );
    let value =
        kiln::dictionary::available_dictionary_value(digest.as_ref().try_into().expect("32 bytes"));
    // The same base64, without the byte sequence's colons.
    value.trim_matches(':').to_owned()
}

#[test]
fn chromium_gets_the_changed_script_as_a_delta_and_runs_it() {
    let Some((node, chromium)) = find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scripts = ["assets/app.3f2a9b1c.js", "assets/app.77aa88bb.js"];
    for (v, name) in (1..=2).zip(scripts) {
        let root = dir.path().join(format!("v{v}"));
        std::fs::create_dir_all(root.join("assets")).unwrap();
        std::fs::write(root.join(name), script(v)).unwrap();
        let page = format!(
            "<!doctype html><title>version {v}</title><p>version {v}</p>\
             <script src=\"/{name}\"></script>\n"
        );
        std::fs::write(root.join("index.html"), page).unwrap();
    }
    let opts = BuildOptions {
        compress: CompressOptions::at(Level::Fast),
        ..BuildOptions::default()
    };
    let (v1, v2) = (dir.path().join("v1.pack"), dir.path().join("v2.pack"));
    build_pack(&dir.path().join("v1"), &v1, &opts).unwrap();
    build_pack(
        &dir.path().join("v2"),
        &v2,
        &BuildOptions {
            base: Base::Packs(vec![v1.clone()]),
            ..opts
        },
    )
    .unwrap();
    let served = dir.path().join("site.pack");
    std::fs::copy(&v1, &served).unwrap();
    let cert = dir.path().join("cert.pem");
    let server = Server::start(&[
        served.to_str().unwrap(),
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-self-signed-out",
        cert.to_str().unwrap(),
    ]);
    let tls_port = server.tls_port.expect("a TLS listener");
    let args = format!(
        "--ignore-certificate-errors-spki-list={}\n--host-resolver-rules=MAP localhost 127.0.0.1",
        spki_hash(&cert)
    );
    let report = run_script(
        &node,
        "dictionaries.mjs",
        &[
            chromium.display().to_string(),
            format!("https://localhost:{tls_port}/"),
            "/".to_owned(),
        ],
        &[
            ("CHROMIUM_ARGS", args),
            ("SWITCH_FROM", v2.display().to_string()),
            ("SWITCH_TO", served.display().to_string()),
            ("VERSION_MARK", "version 2".to_owned()),
        ],
    );
    let script_of = |load: &str, name: &str| {
        report[load]["responses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["url"].as_str().is_some_and(|u| u.ends_with(name)))
            .unwrap_or_else(|| panic!("{load}: no response for {name}: {report}"))
            .clone()
    };
    let first = script_of("first", scripts[0]);
    assert_eq!(first["status"], 200, "{report}");
    assert!(
        first["use_as_dictionary"]
            .as_str()
            .is_some_and(|v| v.starts_with(r#"match="/assets/app.*.js""#)),
        "{report}"
    );
    assert_eq!(report["first"]["result"], format!("v1:{}", expected(1)));
    let second = script_of("second", scripts[1]);
    assert_eq!(second["status"], 200, "{report}");
    assert_eq!(
        second["available_dictionary"].as_str(),
        Some(
            kiln::dictionary::available_dictionary_value(&kiln::dictionary::sha256(
                script(1).as_bytes()
            ))
            .as_str()
        ),
        "{report}"
    );
    assert!(
        matches!(second["content_encoding"].as_str(), Some("dcb" | "dcz")),
        "{report}"
    );
    assert_eq!(report["second"]["result"], format!("v2:{}", expected(2)));
    eprintln!(
        "Chromium {}: {} arrived as {}, the page gave {}",
        report["browser_version"],
        scripts[1],
        second["content_encoding"],
        report["second"]["result"]
    );
}
