//! Which source names are left out of a pack: editor backups, logs, lock
//! files, dotfiles, VCS folders and OS litter, following kawipiko's rules,
//! at every depth. The one dot-name a site needs is kept: the root
//! `.well-known` directory (RFC 8615); what lies under it follows the same
//! rules as everything else, so `.well-known/.DS_Store` or
//! `.well-known/.git/` are not published.

/// The only dot-name kept, and only at the site root.
const WELL_KNOWN: &str = ".well-known";

/// True when a single path component (file or directory name) is ignored
/// wherever it appears.
pub fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.')
        || name.starts_with('#')
        || name.contains('#')
        || name.ends_with('~')
        || name.ends_with(".log")
        || name.ends_with(".tmp")
        || name.ends_with(".temp")
        || name.ends_with(".lock")
        || name == "Thumbs.db"
}

/// True when a directory entry called `name` is ignored; `at_root` says
/// whether it lies directly in the site root.
pub fn is_ignored_entry(at_root: bool, name: &str) -> bool {
    is_ignored_name(name) && !(at_root && name == WELL_KNOWN)
}

/// True when a relative, '/'-separated path is ignored: one of its
/// components is.
pub fn is_ignored_path(path: &str) -> bool {
    path.split('/')
        .enumerate()
        .any(|(depth, name)| is_ignored_entry(depth == 0, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kawipiko_rules() {
        for ignored in [
            ".git",
            ".DS_Store",
            "#draft",
            "notes#1.txt",
            "page.html~",
            "backup#",
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
            "_wildcard.html",
            "log.txt",
            "a.lockfile",
            "thumbs.db",
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
        ] {
            assert!(is_ignored_path(ignored), "{ignored} should be ignored");
        }
    }
}
