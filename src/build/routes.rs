//! Decides, at build time, which request path answers with what; the server
//! then only looks keys up. Each rule can be switched off (`RouteOptions`).
//!
//! For an exact key the precedence is: an existing file > a directory index
//! (`/dir/`) > a stripped suffix (`/page` → `page.html`) > the automatic
//! `/dir` → `/dir/` redirect; then `_redirects` exact rules: a rule whose
//! `from` is served by a file, an index or a stripped suffix is shadowed
//! (skipped) unless forced with `!`, in which case it replaces the route;
//! a rule always replaces an automatic directory redirect and a folder's
//! generated index page (`--index-pages`, `listing`); when two rules
//! share a `from`, the first one wins (Netlify's order). Rules with a splat
//! or `:placeholder` go to the pack's rule list, in file order, for the
//! server to evaluate at run time. A rewrite (200) or 404 rule must target
//! a path of the site: one to a URL (a Netlify proxy) is refused, as is
//! a fixed target no file serves; a pattern whose target no route starts
//! like is a warning.
//!
//! The root `404.html` (with `not_found` on) answers 404 at its own URLs
//! too (`/404.html`, `/404`), as it does for every miss.
//!
//! `_headers` blocks follow the file: see `RoutePlan::headers_paths`.
//!
//! Keys are percent-decoded paths (raw bytes), starting with '/'.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::bail;

use super::netlify::{RedirectRule, has_pattern};
use super::source::{Content, SourceFile};
use super::urlpath::{percent_decode, percent_encode_path};
use crate::pack::RouteKind;

/// Index file names, in order of preference (kawipiko's list).
pub const INDEX_NAMES: [&str; 7] = [
    "index.html",
    "index.htm",
    "index.xhtml",
    "index.xht",
    "index.txt",
    "index.json",
    "index.xml",
];

/// Suffixes stripped from file names, in order of preference.
pub const STRIP_SUFFIXES: [&str; 5] = [".html", ".htm", ".xhtml", ".xht", ".txt"];

/// Prefix of the hierarchical fallback files.
pub const WILDCARD_PREFIX: &str = "_wildcard.";

/// The root file served as the not-found page.
pub const NOT_FOUND_FILE: &str = "404.html";

/// Which routing rules apply; all on by default but `index_pages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteOptions {
    /// `/dir/` serves `dir/index.*`.
    pub index: bool,
    /// `/page` serves `page.html` (and the other suffixes).
    pub strip: bool,
    /// `_wildcard.*` files answer misses under their directory.
    pub wildcard: bool,
    /// Root `404.html` is the not-found page.
    pub not_found: bool,
    /// `/dir` redirects to `/dir/` when the latter has a route.
    pub dir_redirect: bool,
    /// `/dir/` of a folder without an index lists it (`listing`).
    pub index_pages: bool,
}

impl Default for RouteOptions {
    fn default() -> Self {
        RouteOptions {
            index: true,
            strip: true,
            wildcard: true,
            not_found: true,
            dir_redirect: true,
            index_pages: false,
        }
    }
}

/// What a route answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The file at this index of the source list.
    File(usize),
    /// A redirect to this `Location` value.
    Redirect(String),
}

/// Why an exact route exists; decides what may replace it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The file's own path.
    File,
    /// `/dir/` served by `dir/index.*`.
    Index,
    /// `/page` served by `page.html` (or another stripped suffix).
    Stripped,
    /// `/dir` → `/dir/`.
    DirRedirect,
    /// `/dir/` served by the folder's generated index page.
    Listing,
    /// A `_redirects` rule, at this line.
    Rule(usize),
    /// A `_wildcard.*` file.
    Wildcard,
    /// The root `404.html`.
    NotFound,
}

/// One route to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRoute {
    /// Which table the key goes to.
    pub kind: RouteKind,
    /// Empty for the not-found route.
    pub key: Vec<u8>,
    /// 200, a 3xx for redirects, 404 for not-found answers.
    pub status: u16,
    /// What the route answers with.
    pub target: Target,
    /// Why it exists; decides what may replace it.
    pub origin: Origin,
}

impl PlannedRoute {
    /// Conditional requests and ranges apply to stored 200 responses only.
    pub fn validators(&self) -> bool {
        self.status == 200 && matches!(self.target, Target::File(_))
    }
}

/// A stripped URL that more than one file could serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuffixChoice {
    /// The URL, e.g. `/f`.
    pub key: String,
    /// The file it serves, e.g. `f.html`.
    pub served: String,
    /// The files it could have served, in suffix order, e.g. `f.txt`.
    pub others: Vec<String>,
}

/// The routing decisions for a site.
#[derive(Debug, Default)]
pub struct RoutePlan {
    /// Exact routes by key, then wildcards by key, then the not-found route:
    /// a fixed order, so the pack is reproducible.
    pub routes: Vec<PlannedRoute>,
    /// `_redirects` rules with patterns, in file order.
    pub rules: Vec<RedirectRule>,
    /// Lines of `_redirects` rules skipped because a file is served there.
    pub shadowed: Vec<usize>,
    /// One line each (duplicate wildcards, rules skipped as repeated).
    pub warnings: Vec<String>,
    /// Stripped URLs that several files could serve (`/f` for `f.html`
    /// and `f.txt`): the URL, the file that serves it (the first suffix of
    /// `STRIP_SUFFIXES`), and the others, which keep only their own URL.
    pub suffix_choices: Vec<SuffixChoice>,
    /// By file index: the URLs of the file, its own path first, then the
    /// `/dir/` and stripped keys that serve it.
    pub file_urls: Vec<Vec<Vec<u8>>>,
}

impl RoutePlan {
    /// The paths `_headers` patterns are matched against for `route`.
    ///
    /// A user writes a block for a file and expects it on every URL of that
    /// file, so a route serving a file gets the blocks matching any of the
    /// file's URLs (`/page.html` and `/page`, `/dir/index.html` and `/dir/`),
    /// and a route that is not one of them (a `_redirects` rewrite, a
    /// `_wildcard.*` fallback) also those matching its own key. A block for
    /// a rewrite's key stays on the rewrite: it does not reach the file's
    /// own URLs. Redirects carry no `_headers`.
    pub fn headers_paths<'a>(&'a self, route: &'a PlannedRoute) -> Vec<&'a [u8]> {
        let Target::File(i) = route.target else {
            return Vec::new();
        };
        let mut paths: Vec<&[u8]> = self.file_urls[i].iter().map(Vec::as_slice).collect();
        if !route.key.is_empty() && !paths.contains(&route.key.as_slice()) {
            paths.push(&route.key);
        }
        paths
    }
}

/// Plans every route for `files` (sorted, without `_headers`/`_redirects`).
/// `redirects_file` names `_redirects` in errors.
pub fn plan_routes(
    files: &[SourceFile],
    redirects: &[RedirectRule],
    redirects_file: &str,
    opts: &RouteOptions,
) -> anyhow::Result<RoutePlan> {
    let mut plan = RoutePlan::default();
    let mut exact: BTreeMap<Vec<u8>, PlannedRoute> = BTreeMap::new();
    let by_path: BTreeMap<&str, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_str(), i))
        .collect();
    let mut dirs: BTreeSet<&str> = BTreeSet::new();
    dirs.insert("");
    for f in files {
        let mut p = f.path.as_str();
        while let Some((parent, _)) = p.rsplit_once('/') {
            dirs.insert(parent);
            p = parent;
        }
    }
    let dir_key = |dir: &str| -> Vec<u8> {
        if dir.is_empty() {
            b"/".to_vec()
        } else {
            format!("/{dir}/").into_bytes()
        }
    };
    let route = |kind, key: Vec<u8>, status, target, origin| PlannedRoute {
        kind,
        key,
        status,
        target,
        origin,
    };

    for (i, f) in files.iter().enumerate() {
        let key = format!("/{}", f.path).into_bytes();
        let origin = match f.content {
            Content::Generated(_) => Origin::Listing,
            _ => Origin::File,
        };
        exact.insert(
            key.clone(),
            route(RouteKind::Exact, key, 200, Target::File(i), origin),
        );
    }

    if opts.index {
        for dir in &dirs {
            let found = INDEX_NAMES.iter().find_map(|name| {
                let path = if dir.is_empty() {
                    (*name).to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                by_path.get(path.as_str()).copied()
            });
            if let Some(i) = found {
                let key = dir_key(dir);
                exact.entry(key.clone()).or_insert_with(|| {
                    route(RouteKind::Exact, key, 200, Target::File(i), Origin::Index)
                });
            }
        }
    }

    if opts.strip {
        for suffix in STRIP_SUFFIXES {
            for (i, f) in files.iter().enumerate() {
                let name = f.path.rsplit('/').next().unwrap_or(&f.path);
                let Some(stem) = name.strip_suffix(suffix) else {
                    continue;
                };
                if stem.is_empty() || stem == "index" {
                    continue;
                }
                let key = format!("/{}", &f.path[..f.path.len() - suffix.len()]).into_bytes();
                match exact.get(&key) {
                    Some(PlannedRoute {
                        origin: Origin::Stripped,
                        target: Target::File(served),
                        ..
                    }) => {
                        let key = String::from_utf8_lossy(&key).into_owned();
                        match plan.suffix_choices.iter_mut().find(|c| c.key == key) {
                            Some(choice) => choice.others.push(f.path.clone()),
                            None => plan.suffix_choices.push(SuffixChoice {
                                key,
                                served: files[*served].path.clone(),
                                others: vec![f.path.clone()],
                            }),
                        }
                    }
                    Some(_) => {}
                    None => {
                        exact.insert(
                            key.clone(),
                            route(
                                RouteKind::Exact,
                                key,
                                200,
                                Target::File(i),
                                Origin::Stripped,
                            ),
                        );
                    }
                }
            }
        }
    }

    plan.suffix_choices.sort_by(|a, b| a.key.cmp(&b.key));

    let mut wildcards: BTreeMap<Vec<u8>, PlannedRoute> = BTreeMap::new();
    if opts.wildcard {
        // Several `_wildcard.*` in one directory: the extension order of the
        // index list decides (html first), then the name; the rest warn.
        let rank = |name: &str| {
            let ext = &name[WILDCARD_PREFIX.len()..];
            INDEX_NAMES
                .iter()
                .position(|n| n.strip_prefix("index.") == Some(ext))
                .unwrap_or(INDEX_NAMES.len())
        };
        let mut candidates: BTreeMap<Vec<u8>, Vec<(usize, &str, usize)>> = BTreeMap::new();
        for (i, f) in files.iter().enumerate() {
            let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", &f.path));
            if name.starts_with(WILDCARD_PREFIX) {
                candidates
                    .entry(dir_key(dir))
                    .or_default()
                    .push((rank(name), &f.path, i));
            }
        }
        for (key, mut found) in candidates {
            found.sort();
            let (_, chosen, i) = found[0];
            for (_, other, _) in &found[1..] {
                plan.warnings.push(format!(
                    "{other}: ignored, {chosen} is already the wildcard of {}",
                    String::from_utf8_lossy(&key)
                ));
            }
            wildcards.insert(
                key.clone(),
                route(
                    RouteKind::Wildcard,
                    key,
                    200,
                    Target::File(i),
                    Origin::Wildcard,
                ),
            );
        }
    }

    if opts.dir_redirect {
        for dir in dirs.iter().filter(|d| !d.is_empty()) {
            let slash = dir_key(dir);
            if !exact.contains_key(&slash) && !wildcards.contains_key(&slash) {
                continue;
            }
            let key = format!("/{dir}").into_bytes();
            let location = percent_encode_path(&slash);
            exact.entry(key.clone()).or_insert_with(|| {
                route(
                    RouteKind::Exact,
                    key,
                    301,
                    Target::Redirect(location),
                    Origin::DirRedirect,
                )
            });
        }
    }

    for rule in redirects {
        let line = rule.line;
        if matches!(rule.status, 200 | 404) && rule.to.contains("://") {
            bail!(
                "{redirects_file}:{line}: a {} rule must target a path in the site, not a URL: kiln serves files and cannot proxy (redirect with 301/302, or proxy {} in front of kiln)",
                rule.status,
                String::from_utf8_lossy(&rule.from)
            );
        }
        if has_pattern(&rule.from) {
            if matches!(rule.status, 200 | 404) {
                check_rewrite_pattern(rule, &exact, redirects_file, &mut plan.warnings)?;
            }
            plan.rules.push(rule.clone());
            continue;
        }
        let key = rule.from.clone();
        match exact.get(&key).map(|r| r.origin) {
            Some(Origin::Rule(first)) => {
                plan.warnings.push(format!(
                    "{redirects_file}:{line}: skipped, line {first} already handles {}",
                    String::from_utf8_lossy(&key)
                ));
                continue;
            }
            Some(Origin::File | Origin::Index | Origin::Stripped) if !rule.force => {
                plan.shadowed.push(line);
                continue;
            }
            _ => {}
        }
        let planned = match rule.status {
            200 | 404 => {
                let target_path = rule.to.split(['?', '#']).next().unwrap_or("");
                let target_key = percent_decode(target_path);
                let target = match exact.get(&target_key) {
                    Some(PlannedRoute {
                        target: Target::File(i),
                        status: 200,
                        ..
                    }) => Target::File(*i),
                    _ => bail!(
                        "{redirects_file}:{line}: target {} is not a file served by this site",
                        rule.to
                    ),
                };
                route(
                    RouteKind::Exact,
                    key.clone(),
                    rule.status,
                    target,
                    Origin::Rule(line),
                )
            }
            status => route(
                RouteKind::Exact,
                key.clone(),
                status,
                Target::Redirect(rule.to.clone()),
                Origin::Rule(line),
            ),
        };
        exact.insert(key, planned);
    }

    plan.file_urls = files
        .iter()
        .map(|f| vec![format!("/{}", f.path).into_bytes()])
        .collect();
    for r in exact.values() {
        if let (Origin::Index | Origin::Stripped, Target::File(i)) = (r.origin, &r.target) {
            plan.file_urls[*i].push(r.key.clone());
        }
    }
    let not_found_file = by_path
        .get(NOT_FOUND_FILE)
        .copied()
        .filter(|_| opts.not_found);
    if let Some(i) = not_found_file {
        // The not-found page at its own URLs (`/404.html`, `/404`) says
        // 404 too: answered 200, a crawler would index it as a page and a
        // monitor would count it as up.
        for r in exact.values_mut() {
            if r.target == Target::File(i) && matches!(r.origin, Origin::File | Origin::Stripped) {
                r.status = 404;
            }
        }
    }
    plan.routes.extend(exact.into_values());
    plan.routes.extend(wildcards.into_values());
    if let Some(i) = not_found_file {
        plan.routes.push(route(
            RouteKind::NotFound,
            Vec::new(),
            404,
            Target::File(i),
            Origin::NotFound,
        ));
    }
    Ok(plan)
}

/// Checks what can be checked of a rewrite (200) or not-found (404) pattern
/// rule at build time, as exact rules are checked: a target without
/// placeholders must be a file the site serves (else an error: such a rule
/// could only ever answer 404); a target with placeholders must at least
/// start like a route of the site (else a warning: it depends on the
/// request, but no request can reach a file).
fn check_rewrite_pattern(
    rule: &RedirectRule,
    exact: &BTreeMap<Vec<u8>, PlannedRoute>,
    redirects_file: &str,
    warnings: &mut Vec<String>,
) -> anyhow::Result<()> {
    let line = rule.line;
    let target_path = rule.to.split(['?', '#']).next().unwrap_or("");
    let serves_file = |r: &PlannedRoute| r.status == 200 && matches!(r.target, Target::File(_));
    match target_path.split_once(':') {
        None => {
            if !exact
                .get(&percent_decode(target_path))
                .is_some_and(serves_file)
            {
                bail!(
                    "{redirects_file}:{line}: target {} is not a file served by this site",
                    rule.to
                );
            }
        }
        Some((fixed, _)) => {
            let prefix = percent_decode(fixed);
            let reachable = exact
                .range(prefix.clone()..)
                .take_while(|(key, _)| key.starts_with(&prefix))
                .any(|(_, r)| serves_file(r));
            if !reachable {
                warnings.push(format!(
                    "{redirects_file}:{line}: no file of this site starts with {fixed}, so the rule can only answer 404"
                ));
            }
        }
    }
    Ok(())
}
