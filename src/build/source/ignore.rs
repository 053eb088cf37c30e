//! Which source names are left out of a pack: editor backups, logs, lock
//! files, dotfiles and OS litter, following kawipiko's rules, except that
//! `/.well-known/` (RFC 8615) and everything under it is always kept.

/// True when a single path component (file or directory name) is ignored.
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

/// True when a relative, '/'-separated path is ignored: one of its
/// components is, and it is not under the root `.well-known` directory.
pub fn is_ignored_path(path: &str) -> bool {
    if is_well_known(path) {
        return false;
    }
    path.split('/').any(is_ignored_name)
}

/// True for `.well-known` itself and anything below it, at the site root.
pub fn is_well_known(path: &str) -> bool {
    path == ".well-known" || path.starts_with(".well-known/")
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
    fn well_known_is_kept_with_everything_under_it() {
        assert!(!is_ignored_path(".well-known/security.txt"));
        assert!(!is_ignored_path(".well-known/.hidden"));
        assert!(!is_ignored_path(".well-known"));
        assert!(is_ignored_path("sub/.well-known/security.txt"));
        assert!(is_ignored_path(".git/config"));
        assert!(is_ignored_path("docs/.cache/x.html"));
        assert!(!is_ignored_path("docs/a/b.html"));
    }
}
