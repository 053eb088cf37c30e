//! Which source names are left out of a pack: editor backups, logs, lock
//! files, dotfiles, VCS folders and OS litter, following kawipiko's rules,
//! at every depth, and the Netlify rules files below the root (only the
//! root's `_headers` and `_redirects` apply; one elsewhere is never
//! published as a file). The one dot-name a site needs is kept: the root
//! `.well-known` directory (RFC 8615); what lies under it follows the same
//! rules as everything else, so `.well-known/.DS_Store` or
//! `.well-known/.git/` are not published. Each name left out is counted by
//! its `Why` in the build's summary, and listed with `kiln build -v`.

use std::fmt;

use crate::build::{HEADERS_FILE, REDIRECTS_FILE};

/// The only dot-name kept, and only at the site root.
const WELL_KNOWN: &str = ".well-known";

/// Why a name is left out of the pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Why {
    /// A dot-name (`.git`, `.env`, `.DS_Store`), but the root `.well-known`.
    Hidden,
    /// Editors' autosaves and locks: `#name#` (Emacs's autosave) and
    /// `.#name` (its lock). Any other `#` is kept (`C#-guide.html`).
    Hash,
    /// A name ending in `~`: editors' backups.
    Backup,
    /// `*.log`, `*.lock`, `*.tmp`, `*.temp`.
    Scratch,
    /// `Thumbs.db`, Windows' thumbnail cache.
    Thumbnails,
    /// `_headers` or `_redirects` below the root.
    NestedRules,
    /// A symbolic link of a directory source that resolves outside it.
    OutsideLink,
    /// A symbolic link to (or through) a name left out, such as `.git`.
    LeftOutLink,
    /// A private key, by its name (`*.key`) or its content (PEM or DER):
    /// never published (`private_key`).
    PrivateKey,
    /// A file or folder the user building a preview cannot read.
    Unreadable,
    /// A name that is not UTF-8: no route key can name it.
    NotUtf8,
    /// A name no request can ask for: a URL path is refused with a
    /// backslash or a control character (a newline, a tab) in it.
    Unservable,
}

impl Why {
    /// Every reason, in the summary's order.
    pub const ALL: [Why; 12] = [
        Why::Hidden,
        Why::Hash,
        Why::Backup,
        Why::Scratch,
        Why::Thumbnails,
        Why::NestedRules,
        Why::OutsideLink,
        Why::LeftOutLink,
        Why::PrivateKey,
        Why::Unreadable,
        Why::NotUtf8,
        Why::Unservable,
    ];
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::Hidden => "hidden (.name)",
            Why::Hash => "editor's autosave or lock (#name# .#name)",
            Why::Backup => "backup (name~)",
            Why::Scratch => "log, lock or temporary (*.log *.lock *.tmp *.temp)",
            Why::Thumbnails => "Thumbs.db",
            Why::NestedRules => "_headers or _redirects below the root",
            Why::OutsideLink => "symbolic link out of the source",
            Why::LeftOutLink => "symbolic link to a name left out",
            Why::PrivateKey => "private key (*.key, PEM or DER key content)",
            Why::Unreadable => "cannot be read",
            Why::NotUtf8 => "name not UTF-8",
            Why::Unservable => "no URL can name it (backslash or control character)",
        })
    }
}

/// Why a single path component (file or directory name) is left out
/// wherever it appears, if it is.
pub fn why_ignored_name(name: &str) -> Option<Why> {
    let autosave = name.len() >= 2 && name.starts_with('#') && name.ends_with('#');
    if autosave || name.starts_with(".#") {
        Some(Why::Hash)
    } else if name.starts_with('.') {
        Some(Why::Hidden)
    } else if name.ends_with('~') {
        Some(Why::Backup)
    } else if [".log", ".tmp", ".temp", ".lock"]
        .iter()
        .any(|s| name.ends_with(s))
    {
        Some(Why::Scratch)
    } else if name == "Thumbs.db" {
        Some(Why::Thumbnails)
    } else {
        None
    }
}

/// Whether a request can ever name `name`: the server refuses a path
/// holding a backslash or a control byte, even percent-encoded
/// (`serve::handler::path`), so a file so named would be packed for
/// nothing.
pub fn servable_name(name: &str) -> bool {
    !name.chars().any(|c| c == '\\' || c.is_ascii_control())
}

/// True when a single path component is left out wherever it appears.
pub fn is_ignored_name(name: &str) -> bool {
    why_ignored_name(name).is_some()
}

/// Why a directory entry called `name` is left out, if it is; `at_root`
/// says whether it lies directly in the site root.
pub fn why_ignored_entry(at_root: bool, name: &str) -> Option<Why> {
    if at_root {
        return why_ignored_name(name).filter(|_| name != WELL_KNOWN);
    }
    if name == HEADERS_FILE || name == REDIRECTS_FILE {
        return Some(Why::NestedRules);
    }
    why_ignored_name(name)
}

/// True when a directory entry called `name` is left out.
pub fn is_ignored_entry(at_root: bool, name: &str) -> bool {
    why_ignored_entry(at_root, name).is_some()
}

/// The part of a relative, '/'-separated path that is left out (the path
/// itself, or the directory that holds it, with a trailing '/') and why;
/// `None` when the path is kept.
pub fn ignored_part(path: &str) -> Option<(String, Why)> {
    let mut end = 0;
    for (depth, name) in path.split('/').enumerate() {
        end += name.len();
        if let Some(why) = why_ignored_entry(depth == 0, name) {
            let dir = end < path.len();
            return Some((
                format!("{}{}", &path[..end], if dir { "/" } else { "" }),
                why,
            ));
        }
        end += 1;
    }
    None
}

/// True when a relative, '/'-separated path is ignored: one of its
/// components is.
pub fn is_ignored_path(path: &str) -> bool {
    ignored_part(path).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kawipiko_rules() {
        for ignored in [
            ".git",
            ".DS_Store",
            "#draft#",
            ".#draft",
            "##",
            "page.html~",
            "server.log",
            "x.tmp",
            "x.temp",
            "Cargo.lock",
            "Thumbs.db",
        ] {
            assert!(is_ignored_name(ignored), "{ignored} should be ignored");
        }
        for kept in [
            "index.html",
            "_headers",
            "_redirects",
            "_wildcard.html",
            "log.txt",
            "a.lockfile",
            "thumbs.db",
            "C#-guide.html",
            "notes#1.txt",
            "#draft",
            "backup#",
            "#",
        ] {
            assert!(!is_ignored_name(kept), "{kept} should be kept");
        }
    }

    #[test]
    fn only_the_root_well_known_name_is_kept() {
        for kept in [
            ".well-known",
            ".well-known/security.txt",
            ".well-known/acme-challenge/token",
            "docs/a/b.html",
        ] {
            assert!(!is_ignored_path(kept), "{kept} should be kept");
        }
        for ignored in [
            ".well-known/.DS_Store",
            ".well-known/.git/config",
            ".well-known/security.txt~",
            ".well-known/#security.txt#",
            ".well-known/acme-challenge/.hidden",
            "sub/.well-known/security.txt",
            ".git/config",
            "docs/.cache/x.html",
            "docs/_headers",
            "a/b/_redirects",
        ] {
            assert!(is_ignored_path(ignored), "{ignored} should be ignored");
        }
    }

    #[test]
    fn the_part_left_out_and_why() {
        for (path, part) in [
            ("index.html", None),
            ("_headers", None),
            (".git/config", Some((".git/", Why::Hidden))),
            ("a/b/.DS_Store", Some(("a/b/.DS_Store", Why::Hidden))),
            ("a/#x#/y.html", Some(("a/#x#/", Why::Hash))),
            ("a/.#y.html", Some(("a/.#y.html", Why::Hash))),
            ("docs/C#-guide.html", None),
            ("page.html~", Some(("page.html~", Why::Backup))),
            ("logs/app.log", Some(("logs/app.log", Why::Scratch))),
            ("yarn.lock", Some(("yarn.lock", Why::Scratch))),
            ("img/Thumbs.db", Some(("img/Thumbs.db", Why::Thumbnails))),
            (
                "docs/_redirects",
                Some(("docs/_redirects", Why::NestedRules)),
            ),
            (
                ".well-known/.hidden/x",
                Some((".well-known/.hidden/", Why::Hidden)),
            ),
        ] {
            assert_eq!(
                ignored_part(path),
                part.map(|(p, w)| (p.to_owned(), w)),
                "{path}"
            );
        }
    }
}
