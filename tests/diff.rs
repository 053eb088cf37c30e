//! `kiln diff OLD.pack NEW.pack [--json]` with the real binary: routes
//! added, removed and changed (status, redirect target, body, encodings,
//! headers) with sizes, rules, exit status 0 when equal, 1 when different,
//! 2 with a one-line error when a pack cannot be read.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A source tree and the packs built from its states.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let site = Site {
            dir: tempfile::tempdir().unwrap(),
        };
        let src = site.src();
        write(&src, "index.html", &"<h1>home</h1>\n".repeat(30));
        write(&src, "about.html", &"<p>about us</p>\n".repeat(30));
        write(&src, "gone.html", "<p>soon gone</p>");
        write(&src, "moved.html", "<p>becomes a redirect</p>");
        write(&src, "style.css", &"body { margin: 0 }\n".repeat(30));
        write(&src, "_headers", "/style.css\n  X-Style: 1\n");
        write(
            &src,
            "_redirects",
            "/old /index.html 301\n/blog/* /posts/:splat 302\n/docs/* /d/:splat 301\n",
        );
        site
    }
    fn src(&self) -> PathBuf {
        self.dir.path().join("src")
    }
    /// Builds the tree as it stands into NAME.pack, with `extra` flags.
    fn build(&self, name: &str, extra: &[&str]) -> PathBuf {
        let out = self.dir.path().join(format!("{name}.pack"));
        let o = kiln(
            &[
                &[
                    "build",
                    "-q",
                    "--compression",
                    "fast",
                    s(&self.src()),
                    "-o",
                    s(&out),
                ][..],
                extra,
            ]
            .concat(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    }
}

#[test]
fn equal_packs_exit_zero() {
    let site = Site::new();
    let a = site.build("a", &[]);
    let b = site.build("b", &[]);
    let o = kiln(&["diff", s(&a), s(&b)]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "0 added, 0 removed, 0 changed, 10 unchanged routes; rules: 0 added, 0 removed\n"
    );
    let o = kiln(&["diff", "--json", s(&a), s(&b)]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["equal"], true);
    assert_eq!(v["unchanged"], 10);
}

#[test]
fn every_kind_of_change_is_shown_with_sizes() {
    let site = Site::new();
    let old = site.build("old", &[]);
    let src = site.src();
    // A body, a header, a page added and one removed, a file replaced by a
    // forced redirect (status and target), a redirect target, the rules.
    write(&src, "index.html", &"<h1>home, again</h1>\n".repeat(30));
    write(&src, "_headers", "/style.css\n  X-Style: 2\n");
    write(&src, "new.html", "<p>new</p>");
    std::fs::remove_file(src.join("gone.html")).unwrap();
    write(
        &src,
        "_redirects",
        "/old /about 301\n/moved.html /about 308!\n/docs/* /d/:splat 301\n/blog/* /posts/:splat 302\n/x/* /y 302\n",
    );
    let new = site.build("new", &[]);
    let o = kiln(&["diff", s(&old), s(&new)]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    let line = |start: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in\n{text}"))
    };
    assert!(
        line("~ /index.html  body 420 bytes").contains(" → 630 bytes"),
        "{text}"
    );
    assert!(line("~ /  body").contains("→ 630 bytes"), "{text}");
    assert_eq!(line("~ /style.css  "), "~ /style.css  headers x-style");
    assert_eq!(line("- /gone.html  "), "- /gone.html  200 16 bytes");
    assert_eq!(line("+ /new.html  "), "+ /new.html  200 10 bytes");
    assert_eq!(line("~ /old  "), "~ /old  location /index.html → /about");
    assert!(
        line("~ /moved.html  ").starts_with(
            "~ /moved.html  status 200 → 308; location (none) → /about; body 25 bytes → "
        ),
        "{text}"
    );
    assert_eq!(line("+ rule "), "+ rule /x/* /y 302");
    assert_eq!(
        *lines.last().unwrap(),
        "2 added, 2 removed, 5 changed, 3 unchanged routes; rules: 1 added, 0 removed"
    );

    let o = kiln(&["diff", "--json", s(&old), s(&new)]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["equal"], false);
    let changed = v["changed"].as_array().unwrap();
    let moved = changed.iter().find(|c| c["key"] == "/moved.html").unwrap();
    assert_eq!(
        moved["changes"],
        serde_json::json!(["status", "location", "body", "headers"])
    );
    assert_eq!(
        moved["headers"],
        serde_json::json!(["accept-ranges", "cache-control", "last-modified"])
    );
    assert_eq!(moved["old"]["status"], 200);
    assert_eq!(moved["new"]["status"], 308);
    assert_eq!(moved["new"]["location"], "/about");
    let style = changed.iter().find(|c| c["key"] == "/style.css").unwrap();
    assert_eq!(style["headers"], serde_json::json!(["x-style"]));
    let index = changed.iter().find(|c| c["key"] == "/index.html").unwrap();
    assert_eq!(index["old"]["bytes"], 420);
    assert_eq!(index["new"]["bytes"], 630);
    assert!(index["new"]["variants"]["br"].as_u64().unwrap() < 630);
    let removed = v["removed"].as_array().unwrap();
    assert!(
        removed
            .iter()
            .any(|r| r["key"] == "/gone.html" && r["bytes"] == 16)
    );
    assert_eq!(v["rules"]["added"][0]["from"], "/x/*");
}

#[test]
fn reordered_rules_and_other_encodings_are_changes() {
    let site = Site::new();
    let old = site.build("old", &[]);
    write(
        &site.src(),
        "_redirects",
        "/old /index.html 301\n/docs/* /d/:splat 301\n/blog/* /posts/:splat 302\n",
    );
    let reordered = site.build("reordered", &[]);
    let o = kiln(&["diff", s(&old), s(&reordered)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("~ rules reordered\n"), "{}", stdout(&o));

    // The same sources with brotli only: the encodings change, and with
    // them the Vary field of the pages that lose their last encoding.
    let br_only = site.build("br", &["--encodings", "br"]);
    let o = kiln(&["diff", s(&reordered), s(&br_only)]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    let index = text
        .lines()
        .find(|l| l.starts_with("~ /index.html  "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        index.starts_with("~ /index.html  encodings 420 bytes (br "),
        "{index}"
    );
    assert!(!index.contains("body"), "{index}");

    // A body changed with its encodings: their sizes shown once.
    write(
        &site.src(),
        "index.html",
        &"<h1>home, again</h1>\n".repeat(30),
    );
    let changed = site.build("changed", &["--encodings", "br"]);
    let o = kiln(&["diff", s(&reordered), s(&changed)]);
    let text = stdout(&o);
    let index = text
        .lines()
        .find(|l| l.starts_with("~ /index.html  "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        index.starts_with("~ /index.html  body and encodings 420 bytes (br ")
            && index.contains(" → 630 bytes (br "),
        "{index}"
    );
    assert_eq!(index.matches(" bytes").count(), 2, "{index}");
}

#[test]
fn trouble_exits_two_with_one_line() {
    let site = Site::new();
    let good = site.build("good", &[]);
    let missing = site.dir.path().join("missing.pack");
    let not_a_pack = site.dir.path().join("text.pack");
    std::fs::write(&not_a_pack, "hello").unwrap();
    let mut bytes = std::fs::read(&good).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let damaged = site.dir.path().join("damaged.pack");
    std::fs::write(&damaged, bytes).unwrap();
    for (a, b, needle) in [
        (&good, &missing, "cannot open"),
        (&not_a_pack, &good, "not a kiln pack"),
        (&good, &damaged, "checksum mismatch"),
    ] {
        let o = kiln(&["diff", s(a), s(b)]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("kiln: error: ") && err.contains(needle),
            "{err}"
        );
    }
    assert_eq!(kiln(&["diff", s(&good)]).status.code(), Some(2), "usage");
}
