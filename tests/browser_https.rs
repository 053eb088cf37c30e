//! In a real browser: headless Chromium, driven by Playwright
//! (`tests/browser/load_site.mjs`), opens every HTML page of the example
//! site from `kiln serve` over HTTPS with a self-signed certificate, and
//! every resource a page loads must arrive, with status 200, over HTTP/2
//! (ALPN `h2`, what Chromium picks) on TLS; then again with Chromium's
//! HTTP/2 turned off, over HTTP/1.1; then over HTTP/3, QUIC forced on for
//! the server's origin and its certificate trusted by its SPKI hash (as
//! Chromium does for QUIC, which `ignoreHTTPSErrors` does not cover).
//!
//! Skipped (it passes, saying why on stderr) when this machine has no
//! Chromium, no Node or no `tests/browser/node_modules`; `./test` installs
//! them where it can. The name keeps it out of `./test`'s second pass over
//! `serve_*` with `KILN_TEST_TLS=1`: this test is over TLS already, and a
//! browser run is the slowest test there is.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::Server;
use common::browser::{self, Certificates, run_browser};
use serde_json::Value;

const SITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
/// The URL path a visitor opens for each HTML file of the site: a
/// directory's `index.html` at the directory, any other file at its own
/// name. The home page comes first (the script reloads the first page).
fn html_pages(site: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &format!("{prefix}{name}/"), out);
            } else if name == "index.html" {
                out.push(prefix.to_owned());
            } else if name.ends_with(".html") {
                out.push(format!("{prefix}{name}"));
            }
        }
    }
    let mut pages = Vec::new();
    walk(site, "/", &mut pages);
    pages.sort();
    pages
}

/// What is wrong with one page load: any response, request or Resource
/// Timing entry that is not a clean load over `protocol` (as Resource
/// Timing names it) on TLS. A reload may also get 304s.
fn page_problems(load: &Value, reload: bool, protocol: &str) -> Vec<String> {
    let path = load["path"].as_str().unwrap_or("?");
    // The not-found page answers 404 at its own URL too (docs/routing.md);
    // what it loads, and every other page, 200.
    let page_status = if path == "/404.html" { 404 } else { 200 };
    let ok = |status: u64, document: bool| {
        status == if document { page_status } else { 200 } || (reload && status == 304)
    };
    let mut problems = Vec::new();
    let mut complain = |what: String| problems.push(format!("{path}: {what}"));

    let url = load["url"].as_str().unwrap_or_default();
    if !url.starts_with("https://") {
        complain(format!("page URL {url:?} is not https"));
    }
    let responses = load["responses"].as_array().unwrap();
    if !responses.iter().any(|r| r["type"] == "document") {
        complain("no document response".into());
    }
    for r in responses {
        let status = r["status"].as_u64().unwrap_or(0);
        if !ok(status, r["type"] == "document") {
            complain(format!("{} {} answered {status}", r["type"], r["url"]));
        }
        // Over HTTP/3 the security details name QUIC (whose handshake is
        // TLS 1.3's).
        let secure = |t: &str| t.starts_with("TLS") || (protocol == "h3" && t == "QUIC");
        if !r["tls"].as_str().is_some_and(secure) {
            complain(format!("{} arrived without TLS ({})", r["url"], r["tls"]));
        }
    }
    for f in load["failed"].as_array().unwrap() {
        complain(format!("request for {} failed: {}", f["url"], f["error"]));
    }
    // Chromium logs a document's own error status to the console (with the
    // reason phrase over HTTP/1.1, none over h2): on the not-found page that
    // line is the expected 404, not a fault.
    let own_status = format!(
        "console: Failed to load resource: the server responded with a status of {page_status} ("
    );
    for e in load["errors"].as_array().unwrap() {
        if page_status != 200 && e.as_str().is_some_and(|e| e.starts_with(&own_status)) {
            continue;
        }
        complain(format!("the page reported {e}"));
    }
    // Resource Timing also lists what the browser fetched beyond the page's
    // own requests (a favicon), which Playwright's events leave out.
    let timing = load["timing"].as_array().unwrap();
    if !timing.iter().any(|t| {
        t["entry_type"] == "navigation" && t["transfer_size"].as_u64().is_some_and(|n| n > 0)
    }) {
        complain("no navigation over the network in Resource Timing".into());
    }
    for t in timing {
        let status = t["response_status"].as_u64().unwrap_or(0);
        if !ok(status, t["entry_type"] == "navigation") {
            complain(format!("{} answered {status} (Resource Timing)", t["name"]));
        }
        // An entry served from the browser's cache went over no protocol.
        if t["transfer_size"].as_u64().is_some_and(|n| n > 0) && t["next_hop_protocol"] != protocol
        {
            complain(format!(
                "{} came over {} instead of {protocol}",
                t["name"], t["next_hop_protocol"]
            ));
        }
    }
    problems
}

#[test]
fn chromium_loads_every_page_of_the_example_site_over_https() {
    let Some((node, chromium)) = browser::find() else {
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let server = Server::start(&[
        SITE,
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-self-signed-out",
        cert.to_str().unwrap(),
    ]);
    let port = server.tls_port.expect("a TLS port in the start-up line");
    let quic = format!(
        "--origin-to-force-quic-on=127.0.0.1:{port}\n--ignore-certificate-errors-spki-list={}",
        browser::spki_hashes(&cert).join(",")
    );
    let base = format!("https://127.0.0.1:{port}/");
    let pages = html_pages(Path::new(SITE));
    assert!(pages.len() >= 6, "the example site's pages: {pages:?}");

    // Chromium's own choice (h2 by ALPN), then HTTP/1.1 with HTTP/2 off,
    // then HTTP/3.
    let runs = [
        ("h2", "", Certificates::Ignored),
        ("http/1.1", "--disable-http2", Certificates::Ignored),
        ("h3", quic.as_str(), Certificates::Verified),
    ];
    for (protocol, chromium_args, certificates) in runs {
        let report = run_browser(&node, &chromium, chromium_args, certificates, &base, &pages);
        check_report(&report, &pages, protocol, &server);
    }
}

/// Judges one browser run over `protocol`.
fn check_report(report: &Value, pages: &[String], protocol: &str, server: &Server) {
    let loads = report["pages"].as_array().unwrap();
    let visited: Vec<&str> = loads.iter().filter_map(|l| l["path"].as_str()).collect();
    assert_eq!(visited, pages);
    let mut problems: Vec<String> = loads
        .iter()
        .flat_map(|l| page_problems(l, false, protocol))
        .collect();
    problems.extend(page_problems(&report["reload"], true, protocol));
    let version = report["browser_version"].as_str().unwrap_or("?");
    assert!(
        problems.is_empty(),
        "in Chromium {version} over {protocol}:\n{}\nserver stderr:\n{}",
        problems.join("\n"),
        server.stderr_text()
    );

    // The checks above hold for every response; these make sure there were
    // responses of every kind the site has, and compressed ones among them.
    let responses: Vec<&Value> = loads
        .iter()
        .flat_map(|l| l["responses"].as_array().unwrap())
        .collect();
    let types: BTreeSet<&str> = responses
        .iter()
        .filter_map(|r| r["type"].as_str())
        .collect();
    for expected in ["document", "stylesheet", "image", "script"] {
        assert!(types.contains(expected), "no {expected} loaded: {types:?}");
    }
    let brotli = responses
        .iter()
        .filter(|r| r["content_encoding"] == "br")
        .count();
    assert!(brotli > 0, "no response with Content-Encoding: br");
    eprintln!(
        "Chromium {version} over {protocol}: {} pages and a reload, {} responses ({brotli} br), types {types:?}",
        pages.len(),
        responses.len()
    );
}
