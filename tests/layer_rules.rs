//! ARCHITECTURE.md's layer rule, enforced: `net/` imports no protocol or
//! handler type, HTTP/1 does not know whether TLS is on, HTTP/2 and
//! HTTP/3 borrow from no other HTTP version (nor HTTP/3 from QUIC, which
//! it reaches through its `Streams` trait), the handler does not know
//! the protocol. Reads the
//! source of each layer and fails on any path into a layer it must not
//! know (`use` lines, grouped or not, and paths written in place). And
//! the one system-call layer: `libc` is named in `src/sys.rs` alone
//! (everything else calls the kernel through rustix).

use std::path::{Path, PathBuf};

/// Each layer (a folder of `src/serve/`) and the modules of `src/serve/`
/// it must not name.
const RULES: &[(&str, &[&str])] = &[
    (
        "net",
        &[
            "http1",
            "http2",
            "http3",
            "quic",
            "handler",
            "stack",
            "tls",
            "request_context",
        ],
    ),
    ("http1", &["http2", "http3", "quic", "tls", "stack"]),
    ("http2", &["http1", "http3", "quic", "tls", "stack"]),
    ("http3", &["http1", "http2", "quic", "tls", "stack"]),
    ("quic", &["http1", "http2", "handler", "tls", "stack"]),
    (
        "handler",
        &["http1", "http2", "http3", "quic", "tls", "stack", "net"],
    ),
];

/// The module path of a source file below `src/` (`serve/net/mod.rs` is
/// `serve::net`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// Code without `//` comments (a doc comment may name any layer).
fn without_comments(source: &str) -> String {
    source
        .lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The first-level names of a `{…}` group starting at `text[0] == '{'`.
fn group_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut at_item_start = true;
    let mut word = String::new();
    for c in text.chars() {
        if depth == 1 && !word.is_empty() && !(c.is_alphanumeric() || c == '_') {
            names.push(std::mem::take(&mut word));
            at_item_start = false;
        }
        match c {
            '{' => {
                depth += 1;
                at_item_start = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => at_item_start = true,
            c if depth == 1 && at_item_start && (c.is_alphanumeric() || c == '_') => word.push(c),
            _ => {}
        }
    }
    names
}

/// Every module of `src/serve/` the code of module `module` names, through
/// `crate::serve::NAME`, `super::…::NAME` or a group of either.
fn serve_modules_named(module: &[String], source: &str) -> Vec<String> {
    let code = without_comments(source);
    let bytes = code.as_bytes();
    let mut named = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let rest = &code[i..];
        let (mut base, mut after) = if starts_word && rest.starts_with("crate::") {
            (vec!["crate".to_owned()], i + "crate::".len())
        } else if starts_word && rest.starts_with("super::") {
            let mut base: Vec<String> = std::iter::once("crate".to_owned())
                .chain(module.iter().cloned())
                .collect();
            let mut j = i;
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
            (base, j)
        } else {
            i += 1;
            continue;
        };
        // Walk down `a::b::` until a name not followed by `::`, or a group.
        loop {
            let tail = &code[after..];
            if tail.starts_with('{') {
                for name in group_names(tail) {
                    let mut path = base.clone();
                    path.push(name);
                    named.push(path);
                }
                break;
            }
            let len = tail.bytes().take_while(|&b| is_ident(b)).count();
            if len == 0 {
                break;
            }
            base.push(tail[..len].to_owned());
            if tail[len..].starts_with("::") {
                after += len + 2;
            } else {
                named.push(base.clone());
                break;
            }
        }
        i = after.max(i + 1);
    }
    named
        .into_iter()
        .filter(|path| path.len() >= 3 && path[0] == "crate" && path[1] == "serve")
        .map(|path| path[2].clone())
        .collect()
}

/// What a file of `layer` names that the rules forbid.
fn violations(module: &[String], source: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = serve_modules_named(module, source)
        .into_iter()
        .filter(|name| forbidden.contains(&name.as_str()))
        .collect();
    found.sort();
    found.dedup();
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn layers_name_only_the_layers_they_may() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join("serve").join(layer), &mut files);
        assert!(!files.is_empty(), "src/serve/{layer}/ has no source file");
        for file in files {
            let rel = file.strip_prefix(&src).expect("below src/");
            let source = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for name in violations(&module_of(rel), &source, forbidden) {
                broken.push(format!("src/{} names serve::{name}", rel.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layer rule broken (ARCHITECTURE.md, Invariants):\n{}",
        broken.join("\n")
    );
}

/// The identifiers of `source`'s code that mention TLS.
fn tls_identifiers(source: &str) -> Vec<String> {
    without_comments(source)
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| word.to_ascii_lowercase().contains("tls"))
        .map(str::to_owned)
        .collect()
}

/// HTTP/1 does not know whether TLS is on: no field, flag or call of its
/// code names TLS (the scheme comes with the request context).
#[test]
fn http1_does_not_know_whether_tls_is_on() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/http1");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "src/serve/http1/ has no source file");
    let mut found = Vec::new();
    for file in files {
        let source =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for word in tls_identifiers(&source) {
            found.push(format!("{}: {word}", file.display()));
        }
    }
    assert!(found.is_empty(), "HTTP/1 names TLS:\n{}", found.join("\n"));
    assert_eq!(
        tls_identifiers("pub tls: bool, // TLS in a comment\nlet s = TlsSession::new();"),
        ["tls", "TlsSession"]
    );
}

/// The checker itself finds every form a path into a layer takes.
#[test]
fn every_form_of_a_forbidden_path_is_found() {
    let worker = module_of(Path::new("serve/net/worker.rs"));
    let net = module_of(Path::new("serve/net/mod.rs"));
    let forbidden = ["http1", "tls", "handler"];
    let cases: &[(&[String], &str, &[&str])] = &[
        (&worker, "use super::super::http1::Context;", &["http1"]),
        (&net, "use super::http1;", &["http1"]),
        (
            &net,
            "use super::{metrics::Timeout, tls::TlsSession};",
            &["tls"],
        ),
        (
            &worker,
            "use crate::serve::{self, handler, output::Output};",
            &["handler"],
        ),
        (&worker, "let x = crate::serve::tls::probe();", &["tls"]),
        (
            &worker,
            "use crate::serve::{\n    http1::{Conn, Batch},\n    tls,\n};",
            &["http1", "tls"],
        ),
        // Allowed: the layer itself, the layers below, comments.
        (
            &worker,
            "use super::io::Io; use super::super::metrics::Metrics;",
            &[],
        ),
        (&net, "use super::output::{Output, Seg};", &[]),
        (&worker, "// feeds crate::serve::http1 bytes", &[]),
        (&worker, "use crate::pack::Encoding;", &[]),
    ];
    for (module, source, expected) in cases {
        assert_eq!(
            violations(module, source, &forbidden),
            expected.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{source}"
        );
    }
}

/// Whether the code of `source` (comments left out) names the `libc`
/// crate: a path starting with it (`libc::`), or `use libc` / `extern
/// crate libc`; not a longer name containing it, nor prose.
fn names_libc(source: &str) -> bool {
    let code = without_comments(source);
    let bytes = code.as_bytes();
    code.match_indices("libc").any(|(at, _)| {
        if at.checked_sub(1).is_some_and(|i| is_ident(bytes[i])) {
            return false;
        }
        let (before, after) = (
            code[..at].trim_end(),
            code[at + "libc".len()..].trim_start(),
        );
        after.starts_with("::") || before.ends_with("use") || before.ends_with("crate")
    })
}

#[test]
fn libc_is_named_only_in_the_sys_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let named: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with("sys.rs") || file.parent() != Some(src.as_path()))
        .filter(|file| names_libc(&std::fs::read_to_string(file).expect("a source file")))
        .map(|file| {
            file.strip_prefix(&src)
                .expect("below src/")
                .display()
                .to_string()
        })
        .collect();
    assert!(
        named.is_empty(),
        "libc named outside src/sys.rs (ARCHITECTURE.md, Invariants): {named:?}"
    );
}

#[test]
fn every_form_of_naming_libc_is_found() {
    for (source, names) in [
        ("use libc::c_int;", true),
        ("let n = unsafe { libc::read(fd, p, n) };", true),
        ("extern crate libc;", true),
        ("// what libc calls", false),
        ("fn libc_syscalls() {} // glibc", false),
        ("let glibc = 1;", false),
        ("eprintln!(\"no header (linux-libc-dev)\");", false),
    ] {
        assert_eq!(names_libc(source), names, "{source}");
    }
}
