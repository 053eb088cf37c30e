//! `kiln status`: what a node serving a bucket serves and from where,
//! for an operator (a header, one line per site) or a machine (`--json`).
//! It reads the state file the store's client keeps in the cache folder
//! ([`super::state`]), the same record `/ready` and `/metrics` read: no
//! second state, and no request to the store or the server.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::anyhow;

use super::StoreUrl;
use super::state::{self, State};

/// `kiln status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The store `kiln serve` was given (`s3://BUCKET/PREFIX/`): its
    /// cache folder is the default one (as `kiln serve` without
    /// --cache-dir).
    #[arg(value_name = "s3://BUCKET/PREFIX/")]
    pub url: Option<String>,
    /// The cache folder `kiln serve s3://…` was given.
    #[arg(long, value_name = "DIR", env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A site as the cache holds it: its pack and whether it has its own
/// certificate.
struct Site<'a> {
    host: &'a str,
    pack: &'a state::Object,
    tls: bool,
}

/// Runs `kiln status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let cache = match (&args.cache_dir, &args.url) {
        (Some(dir), _) => dir.clone(),
        (None, Some(url)) => {
            super::default_cache_dir(&StoreUrl::parse_folder(url).map_err(|e| anyhow!(e))?)
        }
        (None, None) => anyhow::bail!("give the store (s3://BUCKET/PREFIX/) or --cache-dir DIR"),
    };
    let file = state::path(&cache);
    let state = match std::fs::metadata(&file) {
        Err(e) => anyhow::bail!(
            "{}: {e}: no listing recorded there (is `kiln serve s3://…` running with this cache folder?)",
            file.display()
        ),
        Ok(_) => State::read(&cache)
            .ok_or_else(|| anyhow!("{}: not a store state file", file.display()))?,
    };
    let cache = cache.display().to_string();
    let text = if args.json {
        json(&state, &cache, state::now_ms())
    } else {
        table(&state, &cache, state::now_ms())
    };
    crate::report::to_stdout(&text)
}

/// The sites of `state`, by host.
fn sites(state: &State) -> Vec<Site<'_>> {
    let has = |name: String| state.objects.iter().any(|o| o.name == name);
    let mut sites: Vec<Site<'_>> = state
        .objects
        .iter()
        .filter_map(|o| {
            let host = o.name.strip_suffix(".pack")?;
            Some(Site {
                host,
                pack: o,
                tls: has(format!("{host}.crt")) && has(format!("{host}.key")),
            })
        })
        .collect();
    sites.sort_by(|a, b| a.host.cmp(b.host));
    sites
}

/// `ms` as an RFC 3339 UTC time; `-` for 0 (not known).
fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let mut out = [0u8; 20];
    crate::httpdate::format_rfc3339((ms / 1000) as i64, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A duration of `ms` for people: `850 ms`, `42 s`, `7 min`, `3 h`, `2 d`.
fn span(ms: u64) -> String {
    match ms / 1000 {
        0 => format!("{ms} ms"),
        s @ 1..120 => format!("{s} s"),
        s @ 120..7200 => format!("{} min", s / 60),
        s @ 7200..172_800 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// The header and one line per site.
fn table(state: &State, cache: &str, now: u64) -> String {
    let mut out = String::new();
    let place = match state.place.as_str() {
        "" => String::new(),
        place => format!(" ({place})"),
    };
    let url = match state.url.as_str() {
        "" => "the store",
        url => url,
    };
    let _ = writeln!(out, "serving {url}{place}");
    let _ = writeln!(out, "cache   {cache}");
    let _ = writeln!(
        out,
        "store   {} since {} ({})",
        if state.up { "up" } else { "DOWN" },
        time(state.since_ms),
        span(now.saturating_sub(state.since_ms))
    );
    let _ = writeln!(
        out,
        "listed  {} ({} ago), took {}; {} fetch errors since the client started",
        time(state.listed_ms),
        span(now.saturating_sub(state.listed_ms)),
        span(state.listing_ms),
        state.fetch_errors
    );
    let sites = sites(state);
    let _ = writeln!(out, "{} sites", sites.len());
    if sites.is_empty() {
        return out;
    }
    let rows: Vec<[String; 6]> = sites
        .iter()
        .map(|s| {
            [
                s.host.to_string(),
                s.pack.size.to_string(),
                s.pack.etag.clone(),
                time(s.pack.fetched_at_ms),
                span(s.pack.fetch_ms),
                if s.tls { "own" } else { "-" }.to_string(),
            ]
        })
        .collect();
    let header = ["HOST", "PACK BYTES", "ETAG", "FETCHED", "IN", "CERT"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

/// `text` as a JSON string.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The same as one JSON object (times as Unix milliseconds and RFC 3339).
fn json(state: &State, cache: &str, now: u64) -> String {
    let mut out = format!(
        "{{\"store\":{},\"place\":{},\"cache\":{},\"up\":{},\"since_unix_ms\":{},\"since\":{},\
         \"listed_unix_ms\":{},\"listed\":{},\"listed_age_ms\":{},\"listing_ms\":{},\
         \"fetch_errors\":{},\"sites\":[",
        quoted(&state.url),
        quoted(&state.place),
        quoted(cache),
        state.up,
        state.since_ms,
        quoted(&time(state.since_ms)),
        state.listed_ms,
        quoted(&time(state.listed_ms)),
        now.saturating_sub(state.listed_ms),
        state.listing_ms,
        state.fetch_errors
    );
    for (i, site) in sites(state).iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"host\":{},\"pack_bytes\":{},\"etag\":{},\"fetched_unix_ms\":{},\"fetched\":{},\
             \"fetch_ms\":{},\"own_certificate\":{}}}",
            if i == 0 { "" } else { "," },
            quoted(site.host),
            site.pack.size,
            quoted(&site.pack.etag),
            site.pack.fetched_at_ms,
            quoted(&time(site.pack.fetched_at_ms)),
            site.pack.fetch_ms,
            site.tls
        );
    }
    out.push_str("]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::state::Object;

    fn object(name: &str, size: u64) -> Object {
        Object {
            name: name.into(),
            etag: format!("\"{name}-1\""),
            size,
            fetch_ms: 12,
            fetched_bytes: size,
            fetched_at_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn one_line_per_site_after_a_header() {
        let state = State {
            url: "s3://sites/prod/".into(),
            place: "sites at http://127.0.0.1:9000".into(),
            listed_ms: 1_700_000_060_000,
            listing_ms: 31,
            up: true,
            since_ms: 1_700_000_000_000,
            fetch_errors: 0,
            objects: vec![
                object("b.test.pack", 20),
                object("a.test.pack", 1234),
                object("a.test.crt", 1),
                object("a.test.key", 1),
            ],
        };
        let text = table(&state, "/cache", 1_700_000_062_000);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..5],
            [
                "serving s3://sites/prod/ (sites at http://127.0.0.1:9000)",
                "cache   /cache",
                "store   up since 2023-11-14T22:13:20Z (62 s)",
                "listed  2023-11-14T22:14:20Z (2 s ago), took 31 ms; 0 fetch errors since the client started",
                "2 sites",
            ]
        );
        assert!(lines[5].starts_with("HOST    PACK BYTES  ETAG"), "{text}");
        assert!(lines[6].starts_with("a.test  1234        \"a.test.pack-1\""));
        assert!(lines[6].ends_with("12 ms  own"), "{text}");
        assert!(lines[7].ends_with("12 ms  -"), "{text}");
        let json = json(&state, "/cache", 1_700_000_062_000);
        assert!(json.contains("\"sites\":[{\"host\":\"a.test\",\"pack_bytes\":1234,\"etag\":\"\\\"a.test.pack-1\\\"\""), "{json}");
        assert!(json.contains("\"up\":true,"), "{json}");
    }
}
