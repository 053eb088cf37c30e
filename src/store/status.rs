//! `kiln status`: what a node serving a bucket serves and from where,
//! for an operator (a header, one line per site) or a machine (`--json`).
//! It reads the state file the store's client keeps in the cache folder
//! ([`super::state`]), the same record `/ready` and `/metrics` read: no
//! second state, and no request to the store. Or it asks a running
//! server's `--metrics` listener, whose gauges say the same (another
//! machine's node, or a cache folder this user may not enter).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

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
    /// Ask a running server instead: the address of its --metrics
    /// listener (`HOST:PORT`, or `:PORT` for this machine's).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
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
    let (state, cache) = match &args.metrics {
        Some(addr) => from_metrics(addr, &scrape(addr)?)?,
        None => from_cache(&args)?,
    };
    let text = if args.json {
        json(&state, &cache, state::now_ms())
    } else {
        table(&state, &cache, state::now_ms())
    };
    crate::report::to_stdout(&text)
}

/// The state file of the cache folder the arguments name, and its path.
fn from_cache(args: &StatusArgs) -> anyhow::Result<(State, String)> {
    let cache = match (&args.cache_dir, &args.url) {
        (Some(dir), _) => dir.clone(),
        (None, Some(url)) => {
            super::default_cache_dir(&StoreUrl::parse_folder(url).map_err(|e| anyhow!(e))?)
        }
        (None, None) => {
            anyhow::bail!("give the store (s3://BUCKET/PREFIX/), --cache-dir DIR or --metrics ADDR")
        }
    };
    let file = state::path(&cache);
    if let Err(e) = std::fs::metadata(&file) {
        anyhow::bail!(
            "{}: {e}: no listing recorded there (is `kiln serve s3://…` running with this cache folder?)",
            file.display()
        );
    }
    let state =
        State::read(&cache).ok_or_else(|| anyhow!("{}: not a store state file", file.display()))?;
    Ok((state, cache.display().to_string()))
}

/// How long the server may take to answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The body of `GET /metrics` from the listener at `addr`.
fn scrape(addr: &str) -> anyhow::Result<String> {
    let host = match addr.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None => addr.to_string(),
    };
    let fail = |e: &dyn std::fmt::Display| anyhow!("--metrics {addr}: {e}");
    let target = host
        .to_socket_addrs()
        .map_err(|e| fail(&e))?
        .next()
        .ok_or_else(|| fail(&"no address"))?;
    let mut stream = TcpStream::connect_timeout(&target, SCRAPE_TIMEOUT).map_err(|e| fail(&e))?;
    let mut response = Vec::new();
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .and_then(|()| {
            stream.write_all(
                format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
        })
        .and_then(|()| stream.read_to_end(&mut response))
        .map_err(|e| fail(&e))?;
    let text = String::from_utf8_lossy(&response);
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(fail(&format!(
            "not a metrics listener (it answered {:?})",
            text.lines().next().unwrap_or_default()
        ))),
    }
}

/// A sample's labels: name and (unescaped) value.
type Labels<'l> = Vec<(&'l str, String)>;

/// One sample of the text format: its name, labels and value.
fn sample(line: &str) -> Option<(&str, Labels<'_>, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series, Vec::new(), value));
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}')?;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut text = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => text.push('\n'),
                    c => text.push(c),
                },
                (i, '"') => break i,
                (_, c) => text.push(c),
            }
        };
        labels.push((key.trim_start_matches(','), text));
        rest = &after[end + 1..];
    }
    Some((name, labels, value))
}

/// The state a server's scrape says, and its cache folder.
fn from_metrics(addr: &str, text: &str) -> anyhow::Result<(State, String)> {
    let mut state = State::default();
    let mut cache = None;
    let mut objects: BTreeMap<String, state::Object> = BTreeMap::new();
    let ms = |v: f64| (v * 1000.0).round() as u64;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let get = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        match name {
            "kiln_store_info" => {
                state.url = get("url");
                state.place = get("place");
                cache = Some(get("cache"));
            }
            "kiln_store_up" => state.up = value == 1.0,
            "kiln_store_up_since_timestamp_seconds" => state.since_ms = ms(value),
            "kiln_store_last_listing_timestamp_seconds" => state.listed_ms = ms(value),
            "kiln_store_last_listing_duration_seconds" => state.listing_ms = ms(value),
            "kiln_store_fetch_errors_total" => state.fetch_errors = value as u64,
            "kiln_store_object_info"
            | "kiln_store_fetch_seconds"
            | "kiln_store_fetch_bytes"
            | "kiln_store_fetched_timestamp_seconds" => {
                let o = objects
                    .entry(get("name"))
                    .or_insert_with_key(|name| state::Object {
                        name: name.clone(),
                        ..state::Object::default()
                    });
                match name {
                    "kiln_store_object_info" => o.etag = get("etag"),
                    "kiln_store_fetch_seconds" => o.fetch_ms = ms(value),
                    "kiln_store_fetch_bytes" => {
                        o.size = value as u64;
                        o.fetched_bytes = value as u64;
                    }
                    _ => o.fetched_at_ms = ms(value),
                }
            }
            _ => {}
        }
    }
    let cache = cache.ok_or_else(|| {
        anyhow!(
            "--metrics {addr}: its /metrics says nothing of a store (a `kiln serve s3://…` that has listed it?)"
        )
    })?;
    state.objects = objects.into_values().collect();
    Ok((state, cache))
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

/// How long before `now` the moment `ms` was, for people; `-` for 0 (not
/// known).
fn before(now: u64, ms: u64) -> String {
    match ms {
        0 => "-".into(),
        ms => span(now.saturating_sub(ms)),
    }
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
        before(now, state.since_ms)
    );
    let _ = writeln!(
        out,
        "listed  {} ({} ago), took {}; {} fetch errors since the client started",
        time(state.listed_ms),
        before(now, state.listed_ms),
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
            ..State::default()
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

    #[test]
    fn samples_parse_with_escaped_labels() {
        let (name, labels, value) =
            sample(r#"kiln_store_object_info{name="a.pack",etag="\"x\\y\"\n"} 1"#).unwrap();
        assert_eq!((name, value), ("kiln_store_object_info", 1.0));
        assert_eq!(
            labels,
            [("name", "a.pack".into()), ("etag", "\"x\\y\"\n".into())]
        );
        assert_eq!(sample("kiln_store_up 0").unwrap().2, 0.0);
    }
}
