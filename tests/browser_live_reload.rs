//! The live preview in a real browser: headless Chromium, driven by
//! Playwright (`tests/browser/live_reload.mjs`), opens a page of `kiln
//! serve DIR --watch` and the script saves files of the site as an editor
//! would, never reloading the page itself: a saved stylesheet shows in the
//! open page without a reload (a value the page holds survives), a saved
//! page shows by the page reloading itself, and a page saved while the tab
//! is hidden (its stream let go) once it is shown. Over HTTP/1.1 on cleartext,
//! h2 on TLS (a self-signed certificate) and HTTP/3 (QUIC forced on for
//! the origin, the certificate trusted by its SPKI hash), each under a
//! `Content-Security-Policy` of `default-src 'self'` from `_headers`,
//! which the preview's script and event stream keep to.
//!
//! Skipped (it passes, saying why on stderr) without Chromium, Node or
//! `tests/browser/node_modules`; `./test` installs them where it can.
//! Not named `serve_*`: it runs over TLS already, once.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::browser::{self, run_script};

/// The flags every run gives Chromium (besides Playwright's own: headless,
/// no sandbox, a fresh profile).
const CHROMIUM_FLAGS: &str = "--disable-gpu\n--no-first-run\n--disable-background-networking\n\
                              --disable-component-update\n--disable-sync";

/// The site as a run starts: a page whose heading names the run, a red
/// heading, and a policy that allows nothing from elsewhere.
fn write_site(root: &Path, run: &str) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(
        root.join("_headers"),
        "/*\n  Content-Security-Policy: default-src 'self'\n",
    )
    .unwrap();
    std::fs::write(root.join("style.css"), "h1 { color: rgb(255, 0, 0) }\n").unwrap();
    // What the browser asks for on its own: no 404 in the console.
    std::fs::write(root.join("favicon.ico"), "an icon").unwrap();
    std::fs::write(
        root.join("index.html"),
        format!(
            "<!doctype html><html><head><title>{run}</title>\
             <link rel=\"stylesheet\" href=\"/style.css\"></head>\
             <body><h1>{run}: first</h1></body></html>\n"
        ),
    )
    .unwrap();
}

#[test]
fn chromium_shows_each_saved_change_without_being_reloaded() {
    let Some((node, chromium)) = browser::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    write_site(&root, "start");
    let cert = dir.path().join("cert.pem");
    let server = Server::start(&[
        root.to_str().unwrap(),
        "--watch",
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-self-signed-out",
        cert.to_str().unwrap(),
    ]);
    let tls = server.tls_port.expect("a TLS port");
    let quic = format!(
        "{CHROMIUM_FLAGS}\n--origin-to-force-quic-on=127.0.0.1:{tls}\n\
         --ignore-certificate-errors-spki-list={}",
        browser::spki_hashes(&cert).join(",")
    );
    let runs = [
        (
            "http1",
            format!("http://127.0.0.1:{}/", server.port),
            CHROMIUM_FLAGS.to_owned(),
            "http/1.1",
        ),
        (
            "h2",
            format!("https://127.0.0.1:{tls}/"),
            CHROMIUM_FLAGS.to_owned(),
            "h2",
        ),
        ("h3", format!("https://127.0.0.1:{tls}/"), quic, "h3"),
    ];
    for (run, base, flags, protocol) in runs {
        write_site(&root, run);
        // The run starts once the preview serves its site.
        let start = Instant::now();
        while !String::from_utf8_lossy(&server.get("/", "").body).contains(&format!("{run}: first"))
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{run}: the site never served"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let report = run_script(
            &node,
            "live_reload.mjs",
            &[
                chromium.display().to_string(),
                base,
                root.display().to_string(),
                run.to_owned(),
            ],
            &[("CHROMIUM_ARGS", flags)],
        );
        eprintln!(
            "{run}: a saved stylesheet showed after {} ms, a saved page after {} ms, \
             a page saved while hidden {} ms after the tab was shown ({})",
            report["css_ms"], report["page_ms"], report["shown_ms"], report["browser_version"]
        );
        assert_eq!(report["protocol"], protocol, "{run}: {report}");
        assert_eq!(report["errors"], serde_json::json!([]), "{run}: {report}");
        // The stylesheet: swapped in place, the page's state kept.
        assert_eq!(
            report["kept_after_css"], "kept",
            "{run}: reloaded: {report}"
        );
        assert_eq!(report["navigations_after_css"], 0, "{run}: {report}");
        assert!(report["swaps"].as_u64() >= Some(1), "{run}: {report}");
        // The page: reloaded by the page itself.
        assert!(report["kept_after_page"].is_null(), "{run}: {report}");
        assert!(
            report["navigations_after_page"].as_u64() >= Some(2),
            "{run}: {report}"
        );
        // A hidden tab let its stream go, and showed the page saved
        // meanwhile once shown.
        assert_eq!(report["state_when_hidden"], "hidden", "{run}: {report}");
        assert_eq!(
            report["heading_while_hidden"],
            format!("{run}: second"),
            "{run}: {report}"
        );
    }
}
