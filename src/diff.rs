//! `kiln diff OLD.pack NEW.pack`: what a deploy changes, for review before
//! it goes out. Routes are matched by kind and key; a route is added,
//! removed, or changed in its status, redirect target, body (the identity
//! bytes), encodings (which are stored, or their bytes when the identity is
//! the same), or headers (the identity variant's fields but those that
//! follow from the body, `ETag` and `Content-Length`, and `Location`, shown
//! as the redirect target, as is the page kiln makes for a redirect). Pattern rules are compared as a list. Both packs
//! are verified first. Exit status as `diff`'s: 0 equal, 1 different, 2
//! trouble.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use crate::inspect::escaped;
use crate::pack::format::ENCODINGS;
use crate::pack::{Encoding, Pack, Route, RouteKind, Rule, verify};

/// `kiln diff OLD.pack NEW.pack`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The pack being replaced (what is served now).
    pub old: PathBuf,
    /// The pack replacing it.
    pub new: PathBuf,
    /// Print JSON instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// One aspect of a route that differs between the packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The response status.
    Status,
    /// The redirect target (`Location`).
    Location,
    /// The identity body.
    Body,
    /// The stored encodings, or their bytes for the same identity body.
    Encodings,
    /// Other header fields.
    Headers,
}

impl Change {
    /// The name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Change::Status => "status",
            Change::Location => "location",
            Change::Body => "body",
            Change::Encodings => "encodings",
            Change::Headers => "headers",
        }
    }
}

/// A route of one pack, as the diff shows it.
struct Side<'p> {
    /// The route record.
    route: Route<'p>,
}

impl<'p> Side<'p> {
    fn status(&self) -> u16 {
        self.route.status()
    }

    /// Stored body bytes per variant, in stored order: by encoding, a
    /// delta's named with its dictionary (`dcb@` and the first 8 hex
    /// digits of its SHA-256).
    fn sizes(&self) -> Vec<(String, usize)> {
        self.route
            .variants()
            .chain(self.route.deltas())
            .map(|v| {
                let mut name = v.encoding.token().to_owned();
                if v.encoding.is_delta() {
                    name.push('@');
                    for b in &v.dictionary[..4] {
                        let _ = write!(name, "{b:02x}");
                    }
                }
                (name, v.body.len())
            })
            .collect()
    }

    fn body(&self, encoding: Encoding) -> Option<&'p [u8]> {
        self.route.variant(encoding).map(|v| v.body)
    }

    /// The identity variant's header fields, as (lowercase name, value).
    fn fields(&self) -> Vec<(String, &'p [u8])> {
        let Some(v) = self.route.variant(Encoding::Identity) else {
            return Vec::new();
        };
        crate::hpack::fields(v.head)
            .map(|(name, value)| (String::from_utf8_lossy(name).to_ascii_lowercase(), value))
            .collect()
    }

    /// The redirect target.
    fn location(&self) -> Option<&'p [u8]> {
        let v = self.route.variant(Encoding::Identity)?;
        crate::hpack::fields(v.head)
            .find(|(name, _)| name.eq_ignore_ascii_case(b"location"))
            .map(|(_, value)| value)
    }

    fn json(&self) -> Value {
        let mut out = json!({
            "status": self.status(),
            "bytes": self.body(Encoding::Identity).map_or(0, <[u8]>::len),
            "variants": self.sizes().iter().map(|(e, n)| (e.clone(), json!(n)))
                .collect::<serde_json::Map<_, _>>(),
        });
        if let Some(to) = self.location() {
            out["location"] = Value::String(escaped(to));
        }
        out
    }
}

/// Fields whose values follow from the body, or are shown apart.
const DERIVED_FIELDS: [&str; 3] = ["etag", "content-length", "location"];

/// A route present in both packs that differs.
struct Changed<'p> {
    /// The route in the old pack.
    old: Side<'p>,
    /// The route in the new pack.
    new: Side<'p>,
    /// What differs, in `Change` order.
    changes: Vec<Change>,
    /// The header fields that differ (lowercase names).
    headers: Vec<String>,
}

/// Compares two routes of the same kind and key.
fn compare<'p>(old: Side<'p>, new: Side<'p>) -> Option<Changed<'p>> {
    let mut changes = Vec::new();
    if old.status() != new.status() {
        changes.push(Change::Status);
    }
    if old.location() != new.location() {
        changes.push(Change::Location);
    }
    let same_body = old.body(Encoding::Identity) == new.body(Encoding::Identity);
    // A redirect's body is a page kiln makes from its target: shown as
    // the target.
    let both_redirects = old.location().is_some() && new.location().is_some();
    if !same_body && !both_redirects {
        changes.push(Change::Body);
    }
    let encoded = |side: &Side<'p>| {
        ENCODINGS[1..]
            .iter()
            .map(|&e| side.body(e).map(|b| (b.len(), b)))
            .collect::<Vec<_>>()
    };
    let (old_encoded, new_encoded) = (encoded(&old), encoded(&new));
    let same_set = old_encoded
        .iter()
        .zip(&new_encoded)
        .all(|(a, b)| a.is_some() == b.is_some());
    let deltas = |side: &Side<'p>| {
        side.route
            .deltas()
            .map(|v| (v.encoding, *v.dictionary, v.body))
            .collect::<Vec<_>>()
    };
    if !same_set || (same_body && old_encoded != new_encoded) || deltas(&old) != deltas(&new) {
        changes.push(Change::Encodings);
    }
    let headers = differing_fields(&old.fields(), &new.fields());
    if !headers.is_empty() {
        changes.push(Change::Headers);
    }
    (!changes.is_empty()).then_some(Changed {
        old,
        new,
        changes,
        headers,
    })
}

/// Names of the fields whose values differ, derived ones left out.
fn differing_fields(old: &[(String, &[u8])], new: &[(String, &[u8])]) -> Vec<String> {
    let values = |fields: &[(String, &[u8])], name: &str| -> Vec<Vec<u8>> {
        fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| match name {
                // Its `id` names the build, which any file changes: the
                // pattern is what says the route changed.
                "use-as-dictionary" => std::str::from_utf8(v)
                    .ok()
                    .and_then(crate::build::dictionaries::match_of)
                    .map_or_else(|| v.to_vec(), String::into_bytes),
                _ => v.to_vec(),
            })
            .collect()
    };
    let mut names: Vec<&String> = old.iter().chain(new).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| !DERIVED_FIELDS.contains(&n.as_str()))
        .filter(|n| values(old, n) != values(new, n))
        .cloned()
        .collect()
}

/// A route's key as shown: escaped, the kind when not exact.
fn shown_key(kind: RouteKind, key: &[u8]) -> String {
    match kind {
        RouteKind::Exact => escaped(key),
        RouteKind::Wildcard => format!("{} (wildcard)", escaped(key)),
        RouteKind::NotFound => "(not found)".to_owned(),
    }
}

/// A rule as shown.
fn shown_rule(rule: &Rule<'_>) -> String {
    format!(
        "{} {} {}{}",
        escaped(rule.from),
        escaped(rule.to),
        rule.status,
        if rule.force { "!" } else { "" }
    )
}

/// What a route serves, for an added or removed one: the status and the
/// redirect target or the sizes.
fn shown_route(side: &Side<'_>) -> String {
    match side.location() {
        Some(to) => format!("{} → {}", side.status(), escaped(to)),
        None => format!("{} {}", side.status(), shown_sizes(&side.sizes())),
    }
}

/// Sizes as `1234 bytes (br 300, gzip 400, dcb@0a1b2c3d 40)`.
fn shown_sizes(sizes: &[(String, usize)]) -> String {
    let mut out = String::new();
    for (e, n) in sizes {
        if e == Encoding::Identity.token() {
            let _ = write!(out, "{n} bytes");
        } else {
            let sep = if out.ends_with("bytes") { " (" } else { ", " };
            let _ = write!(out, "{sep}{e} {n}");
        }
    }
    if out.contains('(') {
        out.push(')');
    }
    out
}

/// The whole comparison.
pub struct Diff<'p> {
    /// Routes only the new pack has, by (kind, key), in key order.
    added: Vec<(RouteKind, &'p [u8], Side<'p>)>,
    /// Routes only the old pack has.
    removed: Vec<(RouteKind, &'p [u8], Side<'p>)>,
    /// Routes both have, that differ.
    changed: Vec<(RouteKind, &'p [u8], Changed<'p>)>,
    /// Routes both have, alike.
    unchanged: u64,
    /// Pattern rules only the new pack has.
    rules_added: Vec<Rule<'p>>,
    /// Pattern rules only the old pack has.
    rules_removed: Vec<Rule<'p>>,
    /// The same rules in another order (the first match wins).
    rules_reordered: bool,
}

impl<'p> Diff<'p> {
    /// Compares `old` with `new`.
    pub fn new(old: &'p Pack, new: &'p Pack) -> Diff<'p> {
        let by_key = |pack: &'p Pack| -> BTreeMap<(&'p [u8], RouteKind), Route<'p>> {
            pack.routes()
                .filter_map(|r| Some(((r.key()?, r.kind()?), r)))
                .collect()
        };
        let (mut old_routes, new_routes) = (by_key(old), by_key(new));
        let mut diff = Diff {
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
            unchanged: 0,
            rules_added: Vec::new(),
            rules_removed: Vec::new(),
            rules_reordered: false,
        };
        for ((key, kind), route) in new_routes {
            let new_side = Side { route };
            match old_routes.remove(&(key, kind)) {
                None => diff.added.push((kind, key, new_side)),
                Some(old_route) => match compare(Side { route: old_route }, new_side) {
                    Some(changed) => diff.changed.push((kind, key, changed)),
                    None => diff.unchanged += 1,
                },
            }
        }
        diff.removed = old_routes
            .into_iter()
            .map(|((key, kind), route)| (kind, key, Side { route }))
            .collect();
        let rule_key = |r: &Rule<'p>| (r.from, r.to, r.status, r.force);
        let old_rules: Vec<Rule<'p>> = old.rules().collect();
        let new_rules: Vec<Rule<'p>> = new.rules().collect();
        let in_list =
            |list: &[Rule<'p>], r: &Rule<'p>| list.iter().any(|o| rule_key(o) == rule_key(r));
        diff.rules_added = new_rules
            .iter()
            .filter(|r| !in_list(&old_rules, r))
            .copied()
            .collect();
        diff.rules_removed = old_rules
            .iter()
            .filter(|r| !in_list(&new_rules, r))
            .copied()
            .collect();
        diff.rules_reordered = diff.rules_added.is_empty()
            && diff.rules_removed.is_empty()
            && old_rules
                .iter()
                .map(rule_key)
                .ne(new_rules.iter().map(rule_key));
        diff
    }

    /// True when the packs serve the same thing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && !self.rules_changed()
    }

    /// The keys of the changed routes, as shown.
    pub fn changed_keys(&self) -> Vec<String> {
        self.changed
            .iter()
            .map(|(k, key, _)| shown_key(*k, key))
            .collect()
    }

    /// The keys of the added routes, as shown.
    pub fn added_keys(&self) -> Vec<String> {
        self.added
            .iter()
            .map(|(k, key, _)| shown_key(*k, key))
            .collect()
    }

    /// The keys of the removed routes, as shown.
    pub fn removed_keys(&self) -> Vec<String> {
        self.removed
            .iter()
            .map(|(k, key, _)| shown_key(*k, key))
            .collect()
    }

    /// The stylesheets that changed, when nothing else a browser would
    /// see did (the live preview swaps them in place of a reload): every
    /// route added, removed or changed (in more than its stored
    /// encodings, which a browser never tells apart) is an exact route
    /// serving `text/css`, and the rules are the same. Keys as raw paths.
    pub fn stylesheets_only(&self) -> Option<Vec<String>> {
        if self.rules_changed() {
            return None;
        }
        let stylesheet = |kind: RouteKind, side: &Side<'p>| {
            kind == RouteKind::Exact
                && side.fields().iter().any(|(name, value)| {
                    name == "content-type" && value.to_ascii_lowercase().starts_with(b"text/css")
                })
        };
        let mut keys = Vec::new();
        let sides = self
            .added
            .iter()
            .chain(&self.removed)
            .map(|(kind, key, side)| (*kind, *key, side));
        let changed = self
            .changed
            .iter()
            .filter(|(_, _, c)| c.changes != [Change::Encodings])
            .flat_map(|(kind, key, c)| [(*kind, *key, &c.old), (*kind, *key, &c.new)]);
        for (kind, key, side) in sides.chain(changed) {
            if !stylesheet(kind, side) {
                return None;
            }
            let key = String::from_utf8_lossy(key).into_owned();
            if keys.last() != Some(&key) {
                keys.push(key);
            }
        }
        Some(keys)
    }

    /// True when the pattern rules differ.
    pub fn rules_changed(&self) -> bool {
        !self.rules_added.is_empty() || !self.rules_removed.is_empty() || self.rules_reordered
    }

    /// The lines `kiln diff` prints.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut lines: Vec<(String, String)> = Vec::new();
        for (kind, key, side) in &self.removed {
            lines.push((
                shown_key(*kind, key),
                format!("- {}  {}", shown_key(*kind, key), shown_route(side)),
            ));
        }
        for (kind, key, side) in &self.added {
            lines.push((
                shown_key(*kind, key),
                format!("+ {}  {}", shown_key(*kind, key), shown_route(side)),
            ));
        }
        for (kind, key, c) in &self.changed {
            let mut what = Vec::new();
            // A body and its encodings that both changed share one pair
            // of sizes: each shows every variant's.
            let both = c.changes.contains(&Change::Body) && c.changes.contains(&Change::Encodings);
            for change in &c.changes {
                what.push(match change {
                    Change::Encodings if both => continue,
                    Change::Body if both => format!(
                        "body and encodings {} → {}",
                        shown_sizes(&c.old.sizes()),
                        shown_sizes(&c.new.sizes())
                    ),
                    Change::Status => format!("status {} → {}", c.old.status(), c.new.status()),
                    Change::Location => format!(
                        "location {} → {}",
                        c.old.location().map_or("(none)".into(), escaped),
                        c.new.location().map_or("(none)".into(), escaped)
                    ),
                    Change::Body => format!(
                        "body {} → {}",
                        shown_sizes(&c.old.sizes()),
                        shown_sizes(&c.new.sizes())
                    ),
                    Change::Encodings => format!(
                        "encodings {} → {}",
                        shown_sizes(&c.old.sizes()),
                        shown_sizes(&c.new.sizes())
                    ),
                    Change::Headers => format!("headers {}", c.headers.join(", ")),
                });
            }
            lines.push((
                shown_key(*kind, key),
                format!("~ {}  {}", shown_key(*kind, key), what.join("; ")),
            ));
        }
        lines.sort();
        for (_, line) in lines {
            let _ = writeln!(out, "{line}");
        }
        for rule in &self.rules_removed {
            let _ = writeln!(out, "- rule {}", shown_rule(rule));
        }
        for rule in &self.rules_added {
            let _ = writeln!(out, "+ rule {}", shown_rule(rule));
        }
        if self.rules_reordered {
            let _ = writeln!(out, "~ rules reordered");
        }
        let _ = writeln!(
            out,
            "{} added, {} removed, {} changed, {} unchanged routes; rules: {} added, {} removed{}",
            self.added.len(),
            self.removed.len(),
            self.changed.len(),
            self.unchanged,
            self.rules_added.len(),
            self.rules_removed.len(),
            if self.rules_reordered {
                ", reordered"
            } else {
                ""
            }
        );
        out
    }

    /// The same as one JSON document.
    pub fn json(&self, old: &Pack, new: &Pack) -> Value {
        let route = |kind: RouteKind, key: &[u8], side: &Side<'_>| {
            let mut v = side.json();
            v["key"] = Value::String(escaped(key));
            v["kind"] = Value::String(kind.name().into());
            v
        };
        let rule = |r: &Rule<'_>| json!({"from": escaped(r.from), "to": escaped(r.to), "status": r.status, "force": r.force});
        json!({
            "old": old.path().display().to_string(),
            "new": new.path().display().to_string(),
            "equal": self.is_empty(),
            "added": self.added.iter().map(|(k, key, s)| route(*k, key, s)).collect::<Vec<_>>(),
            "removed": self.removed.iter().map(|(k, key, s)| route(*k, key, s)).collect::<Vec<_>>(),
            "changed": self.changed.iter().map(|(kind, key, c)| json!({
                "key": escaped(key),
                "kind": kind.name(),
                "changes": c.changes.iter().map(|c| c.name()).collect::<Vec<_>>(),
                "headers": c.headers,
                "old": c.old.json(),
                "new": c.new.json(),
            })).collect::<Vec<_>>(),
            "unchanged": self.unchanged,
            "rules": {
                "added": self.rules_added.iter().map(rule).collect::<Vec<_>>(),
                "removed": self.rules_removed.iter().map(rule).collect::<Vec<_>>(),
                "reordered": self.rules_reordered,
            },
        })
    }
}

/// Opens and verifies a pack for the diff.
fn open(path: &std::path::Path) -> anyhow::Result<Pack> {
    let pack = Pack::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    verify::verify(&pack).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(pack)
}

/// `kiln diff`: `Ok(true)` when the packs differ.
pub fn run(args: DiffArgs) -> anyhow::Result<bool> {
    let old = open(&args.old)?;
    let new = open(&args.new)?;
    let diff = Diff::new(&old, &new);
    let text = if args.json {
        serde_json::to_string_pretty(&diff.json(&old, &new))? + "\n"
    } else {
        diff.text()
    };
    crate::report::to_stdout(&text)?;
    Ok(!diff.is_empty())
}
