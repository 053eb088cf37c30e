//! `--index-pages`: an HTML listing of every folder the site serves no
//! index for, made at build time. Each is an ordinary file of the build
//! (`Content::Generated`, at the folder's path with a final `/`), so it
//! is compressed, given `_headers`, validators and a route at `/dir/` like
//! any page, and `kiln verify`, `inspect` and `diff` see a route like any
//! other. A page holds only what the source gives (names, sizes,
//! modification times), never the time of the build, so the pack stays
//! reproducible.
//!
//! A folder gets no listing when it has an index file (with `index` on) or
//! a `_wildcard.*` (with `wildcard` on: the fallback already answers its
//! `/dir/`), or when the server would hide it (a segment starting with
//! `.`, other than the root's `.well-known`); hidden entries are not
//! listed either.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::routes::{INDEX_NAMES, RouteOptions, WILDCARD_PREFIX};
use super::source::{Content, SourceFile};
use super::urlpath::{html_escape, percent_encode_path};

/// What a folder holds, as its page lists it.
#[derive(Default)]
struct Folder<'a> {
    /// Files directly in it: name, size, modification time.
    files: Vec<(&'a str, u64, i64)>,
    /// Subfolders by name, with the newest modification time beneath.
    folders: BTreeMap<&'a str, i64>,
    /// The newest modification time beneath it: the page's.
    newest: i64,
    /// It has an index file or a `_wildcard.*` that answers `/dir/`.
    answered: bool,
}

/// The index pages of every folder of `files` (sorted, without `_headers`
/// and `_redirects`) that `opts` leaves without an answer at `/dir/`.
pub fn index_pages(files: &[SourceFile], opts: &RouteOptions) -> Vec<SourceFile> {
    let mut folders: BTreeMap<&str, Folder<'_>> = BTreeMap::new();
    folders.entry("").or_default();
    for f in files {
        let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", &f.path));
        let folder = folders.entry(dir).or_default();
        folder.files.push((name, f.len, f.mtime));
        folder.newest = folder.newest.max(f.mtime);
        folder.answered |= opts.index && INDEX_NAMES.contains(&name)
            || opts.wildcard && name.starts_with(WILDCARD_PREFIX);
        let mut child = dir;
        while !child.is_empty() {
            let (parent, name) = child.rsplit_once('/').unwrap_or(("", child));
            let folder = folders.entry(parent).or_default();
            let newest = folder.folders.entry(name).or_insert(f.mtime);
            *newest = (*newest).max(f.mtime);
            folder.newest = folder.newest.max(f.mtime);
            child = parent;
        }
    }
    folders
        .iter()
        .filter(|(dir, folder)| !folder.answered && !hidden(dir))
        .map(|(dir, folder)| {
            let page: Arc<[u8]> = page(dir, folder).into_bytes().into();
            SourceFile {
                path: if dir.is_empty() {
                    String::new()
                } else {
                    format!("{dir}/")
                },
                len: page.len() as u64,
                content: Content::Generated(page),
                mtime: folder.newest,
            }
        })
        .collect()
}

/// Whether the server hides what is at `path` (a relative path): as
/// `serve::handler::normalize` decides, a segment starting with `.`
/// other than a first `.well-known`.
fn hidden(path: &str) -> bool {
    path.split('/')
        .enumerate()
        .any(|(i, seg)| seg.starts_with('.') && !(i == 0 && seg == ".well-known"))
}

/// The page of the folder at `dir`: subfolders, then files, each by name
/// (byte order); names escaped, links relative and percent-encoded (`./`
/// first, so that a name with a `:` is not read as a scheme).
fn page(dir: &str, folder: &Folder<'_>) -> String {
    let title = html_escape(&if dir.is_empty() {
        "/".to_owned()
    } else {
        format!("/{dir}/")
    });
    let mut out = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Index of {title}</title>\
         <style>body{{font-family:system-ui,sans-serif;margin:2em}}\
         td{{padding:.2em 1em .2em 0}}td:nth-child(2){{text-align:right}}</style>\
         </head>\n<body>\n<h1>Index of {title}</h1>\n<table>\n\
         <tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n"
    );
    if !dir.is_empty() {
        out.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    let at = |base: &str, name: &str| {
        if base.is_empty() {
            name.to_owned()
        } else {
            format!("{base}/{name}")
        }
    };
    for (name, newest) in &folder.folders {
        if hidden(&at(dir, name)) {
            continue;
        }
        row(&mut out, &format!("{name}/"), None, *newest);
    }
    let mut files = folder.files.clone();
    files.sort_unstable();
    for (name, len, mtime) in files {
        if hidden(&at(dir, name)) {
            continue;
        }
        row(&mut out, name, Some(len), mtime);
    }
    out.push_str("</table>\n</body></html>\n");
    out
}

/// One row: the link, the size (none for a folder), the time.
fn row(out: &mut String, name: &str, len: Option<u64>, mtime: i64) {
    let href = html_escape(&format!("./{}", percent_encode_path(name.as_bytes())));
    let mut time = [0; 20];
    crate::httpdate::format_rfc3339(mtime, &mut time);
    let time = String::from_utf8_lossy(&time);
    let _ = writeln!(
        out,
        "<tr><td><a href=\"{href}\">{}</a></td><td>{}</td><td><time datetime=\"{time}\">{} {}</time></td></tr>",
        html_escape(name),
        len.map_or("-".to_owned(), |n| n.to_string()),
        &time[..10],
        &time[11..16],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, len: u64, mtime: i64) -> SourceFile {
        SourceFile {
            path: path.to_owned(),
            content: Content::Generated(Arc::from(vec![0; len as usize])),
            len,
            mtime,
        }
    }

    fn text(page: &SourceFile) -> String {
        String::from_utf8(page.read().unwrap()).unwrap()
    }

    #[test]
    fn folders_without_an_answer_get_a_page() {
        let files = [
            file("a b/x&y.txt", 3, 100),
            file("a b/deep/z.txt", 1, 300),
            file("app/_wildcard.html", 1, 0),
            file("docs/index.html", 1, 0),
            file("index.html", 1, 0),
            file(".git/config", 1, 0),
            file(".well-known/security.txt", 1, 0),
        ];
        let pages = index_pages(&files, &RouteOptions::default());
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, [".well-known/", "a b/", "a b/deep/"]);
        let page = text(&pages[1]);
        assert!(page.contains("<title>Index of /a b/</title>"), "{page}");
        assert!(page.contains("<a href=\"./deep/\">deep/</a>"), "{page}");
        assert!(
            page.contains("<a href=\"./x%26y.txt\">x&amp;y.txt</a></td><td>3</td>"),
            "{page}"
        );
        assert!(page.find("deep/").unwrap() < page.find("x&amp;y").unwrap());
        assert_eq!(pages[1].mtime, 300, "the newest beneath");
        assert!(page.contains("1970-01-01 00:05"), "{page}");

        let no_index = RouteOptions {
            index: false,
            ..RouteOptions::default()
        };
        let pages = index_pages(&files, &no_index);
        let root = pages.iter().find(|p| p.path.is_empty()).unwrap();
        let page = text(root);
        assert!(!page.contains(".git"), "hidden entries are not listed");
        assert!(page.contains("./.well-known/"));
        assert!(!page.contains("../"), "no parent link at the root");
    }
}
