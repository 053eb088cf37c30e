//! `kiln inspect`: lists a pack's routes — key, kind, status, the stored
//! variants with their body and HPACK block sizes, optionally the identity
//! header block — and a summary (with the provenance records an incremental
//! build reuses, per encoding); `--json` gives the same as one JSON
//! document. Keys, rules and headers are shown escaped (see `escaped`):
//! they come from the site.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use crate::pack::format::{ENCODINGS, Section};
use crate::pack::{Encoding, Pack, Route};

/// `kiln inspect SITE.pack`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The pack file.
    pub pack: PathBuf,
    /// Also print the prepared header block of each route's identity variant.
    #[arg(long)]
    pub headers: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Short names used in the table.
fn short(e: Encoding) -> &'static str {
    match e {
        Encoding::Identity => "id",
        Encoding::Br => "br",
        Encoding::Zstd => "zstd",
        Encoding::Gzip => "gz",
    }
}

/// Pack bytes as text that is safe on a terminal and unambiguous: control
/// and other invisible characters are escaped (`\r`, `\u{1b}`,
/// `\u{202e}`), bytes that are not UTF-8
/// become `\xFF`, and `\` itself is doubled. Keys come from file names
/// and `_redirects`, i.e. from whoever wrote the site.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let printable = c == '"' || c == '\'' || c.escape_debug().count() == 1;
            if !printable || c == '\\' {
                out.extend(c.escape_debug());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

fn key_text(route: &Route<'_>) -> String {
    escaped(route.key().unwrap_or(b"?"))
}

/// The `Location` of a redirect route, read from its prepared header block.
fn location(route: &Route<'_>) -> Option<String> {
    let head = route.variant(Encoding::Identity)?.head;
    head.split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"Location: "))
        .map(|l| escaped(l.strip_suffix(b"\r").unwrap_or(l)))
}

fn kind_name(route: &Route<'_>) -> &'static str {
    route.kind().map_or("?", |k| k.name())
}

/// The whole pack as a JSON value (also the source of the summary).
pub fn to_json(pack: &Pack, with_headers: bool) -> Value {
    let mut routes = Vec::new();
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for route in pack.routes() {
        *by_kind
            .entry(format!("{} {}", kind_name(&route), route.status()))
            .or_default() += 1;
        let variants: Vec<Value> = route
            .variants()
            .map(|v| {
                json!({
                    "encoding": v.encoding.token(),
                    "bytes": v.body.len(),
                    "hpack_bytes": v.hpack.len(),
                    "hpack_indexed_bytes": crate::hpack::indexed_len(v.hpack.len(), v.spans),
                    "qpack_bytes": v.qpack_block().len(),
                })
            })
            .collect();
        let mut r = json!({
            "key": key_text(&route),
            "kind": kind_name(&route),
            "status": route.status(),
            "validators": route.has_validators(),
            "last_modified": route.last_modified(),
            "variants": variants,
        });
        if let Some(to) = location(&route) {
            r["location"] = Value::String(to);
        }
        if with_headers && let Some(v) = route.variant(Encoding::Identity) {
            r["headers"] = Value::String(String::from_utf8_lossy(v.head).into_owned());
        }
        routes.push(r);
    }
    let rules: Vec<Value> = pack
        .rules()
        .map(|r| {
            json!({
                "from": escaped(r.from),
                "to": escaped(r.to),
                "status": r.status,
                "force": r.force,
            })
        })
        .collect();
    let mut per_encoding = serde_json::Map::new();
    let bodies = body_totals(pack);
    for e in ENCODINGS {
        let (count, bytes) = bodies[e as usize];
        per_encoding.insert(e.token().into(), json!({"bodies": count, "bytes": bytes}));
    }
    let blocks = header_block_totals(pack);
    let header_blocks = json!({
        "http1": {"blocks": blocks[0].0, "bytes": blocks[0].1},
        "hpack": {"blocks": blocks[1].0, "bytes": blocks[1].1},
        "qpack": {"blocks": blocks[2].0, "bytes": blocks[2].1},
        "hpack_shared": pack.shared_fields().map_or(
            json!({"fields": 0, "table_room": 0}),
            |set| json!({"fields": set.len(), "table_room": set.room}),
        ),
    });
    let mut provenance = serde_json::Map::new();
    for (e, (kept, not_kept)) in ENCODINGS.iter().zip(provenance_totals(pack)).skip(1) {
        provenance.insert(
            e.token().into(),
            json!({"kept": kept, "not_kept": not_kept}),
        );
    }
    json!({
        "pack": pack.path().display().to_string(),
        "pack_bytes": pack.bytes().len(),
        "routes": routes,
        "rules": rules,
        "summary": {
            "routes": pack.route_count(),
            "routes_by_kind_status": by_kind,
            "variants": pack.variant_count(),
            "rules": pack.rule_count(),
            "body_section_bytes": pack.section(Section::Bodies).1,
            "bodies_by_encoding": per_encoding,
            "header_blocks": header_blocks,
            "provenance_records": pack.provenance_count(),
            "provenance_by_encoding": provenance,
        },
    })
}

/// Distinct bodies and their bytes per encoding (a body shared by several
/// variants counts once).
fn body_totals(pack: &Pack) -> [(u64, u64); 4] {
    let mut seen = std::collections::HashSet::new();
    let mut totals = [(0u64, 0u64); 4];
    for route in pack.routes() {
        for v in route.variants() {
            if seen.insert(v.body_off) {
                let t = &mut totals[v.encoding as usize];
                t.0 += 1;
                t.1 += v.body.len() as u64;
            }
        }
    }
    totals
}

/// Provenance records per encoding: (bodies kept, tried and not kept).
fn provenance_totals(pack: &Pack) -> [(u64, u64); 4] {
    let mut totals = [(0u64, 0u64); 4];
    for p in pack.provenance_records() {
        let t = &mut totals[p.encoding as usize];
        if p.body.is_some() {
            t.0 += 1;
        } else {
            t.1 += 1;
        }
    }
    totals
}

/// Distinct header blocks and their bytes, HTTP/1, HPACK then QPACK (a
/// block shared by several variants counts once).
fn header_block_totals(pack: &Pack) -> [(u64, u64); 3] {
    let mut seen = std::collections::HashSet::new();
    let mut totals = [(0u64, 0u64); 3];
    for route in pack.routes() {
        for v in route.variants() {
            for (i, block) in [v.head, v.hpack, v.qpack_block()].into_iter().enumerate() {
                if seen.insert((i, block.as_ptr())) {
                    totals[i].0 += 1;
                    totals[i].1 += block.len() as u64;
                }
            }
        }
    }
    totals
}

/// The table, as printed.
fn table(pack: &Pack, with_headers: bool) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    let keys: Vec<String> = pack.routes().map(|r| key_text(&r)).collect();
    let width = keys
        .iter()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(3)
        .clamp(3, 60);
    writeln!(
        out,
        "{:<width$}  {:<9}  {:>6}  variants (body bytes, h2: HPACK block bytes[/with the shared fields indexed], h3: QPACK field line bytes)",
        "key", "kind", "status"
    )?;
    for (route, key) in pack.routes().zip(&keys) {
        let shown = if key.is_empty() { "(not found)" } else { key };
        let variants: Vec<String> = route
            .variants()
            .map(|v| {
                let indexed = match v.spans {
                    [] => String::new(),
                    spans => format!("/{}", crate::hpack::indexed_len(v.hpack.len(), spans)),
                };
                format!(
                    "{} {} h2:{}{indexed} h3:{}",
                    short(v.encoding),
                    v.body.len(),
                    v.hpack.len(),
                    v.qpack_block().len()
                )
            })
            .collect();
        let to = location(&route)
            .map(|l| format!("  -> {l}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{shown:<width$}  {:<9}  {:>6}  {}{to}",
            kind_name(&route),
            route.status(),
            variants.join(" ")
        )?;
        if with_headers && let Some(v) = route.variant(Encoding::Identity) {
            for line in v
                .head
                .split(|&b| b == b'\n')
                .map(|l| escaped(l.strip_suffix(b"\r").unwrap_or(l)))
                .filter(|l| !l.is_empty())
            {
                writeln!(out, "    {line}")?;
            }
        }
    }
    for rule in pack.rules() {
        writeln!(
            out,
            "rule  {} -> {}  {}{}",
            escaped(rule.from),
            escaped(rule.to),
            rule.status,
            if rule.force { "!" } else { "" }
        )?;
    }
    let summary = to_json(pack, false)["summary"].clone();
    writeln!(out)?;
    writeln!(out, "routes    {}", pack.route_count())?;
    if let Some(kinds) = summary["routes_by_kind_status"].as_object() {
        for (k, n) in kinds {
            writeln!(out, "  {k:<16} {n}")?;
        }
    }
    writeln!(out, "variants  {}", pack.variant_count())?;
    writeln!(out, "rules     {}", pack.rule_count())?;
    for (e, (count, bytes)) in ENCODINGS.iter().zip(body_totals(pack)) {
        writeln!(out, "{:<9} {count} bodies, {bytes} bytes", e.token())?;
    }
    let [http1, hpack, qpack] = header_block_totals(pack);
    writeln!(
        out,
        "heads     {} HTTP/1 blocks, {} bytes; {} HPACK blocks, {} bytes; {} QPACK blocks, {} bytes",
        http1.0, http1.1, hpack.0, hpack.1, qpack.0, qpack.1
    )?;
    if let Some(set) = pack.shared_fields() {
        writeln!(
            out,
            "shared    {} HPACK fields, {} bytes of a client's table",
            set.len(),
            set.room
        )?;
    }
    let made: Vec<String> = ENCODINGS
        .iter()
        .zip(provenance_totals(pack))
        .skip(1)
        .filter(|(_, (kept, not_kept))| kept + not_kept > 0)
        .map(|(e, (kept, not_kept))| format!("{} {kept} kept, {not_kept} not", e.token()))
        .collect();
    writeln!(
        out,
        "provenance {} records{}",
        pack.provenance_count(),
        if made.is_empty() {
            String::new()
        } else {
            format!(" ({})", made.join("; "))
        }
    )?;
    writeln!(out, "pack      {} bytes", pack.bytes().len())?;
    Ok(out)
}

/// `kiln inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let pack =
        Pack::open(&args.pack).map_err(|e| anyhow::anyhow!("{}: {e}", args.pack.display()))?;
    let text = if args.json {
        serde_json::to_string_pretty(&to_json(&pack, args.headers))? + "\n"
    } else {
        table(&pack, args.headers)?
    };
    crate::report::to_stdout(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_is_terminal_safe_and_unambiguous() {
        assert_eq!(escaped("/café/a b\"'".as_bytes()), "/café/a b\"'");
        assert_eq!(escaped(b"/a\r\nb\x1b[31m"), "/a\\r\\nb\\u{1b}[31m");
        assert_eq!(escaped(b"/\xff\xfe\\"), "/\\xFF\\xFE\\\\");
        assert_eq!(escaped("/\u{202e}gpj.exe".as_bytes()), "/\\u{202e}gpj.exe");
    }
}
