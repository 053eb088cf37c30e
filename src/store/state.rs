//! The state file `kiln store sync` keeps in the cache folder
//! (`.kiln-store/state`, hidden: the folder-of-sites scan skips it), for
//! the server's `/ready` and `/metrics`. Written whole to a temporary
//! file and renamed after each listing; one record per line, fields
//! separated by spaces:
//!
//! ```text
//! store URL            what is mirrored (`s3://BUCKET/PREFIX/`)
//! place TEXT           where from (`BUCKET at ENDPOINT`, `BUCKET on AWS`)
//! listed UNIX_MS       the end of the last listing
//! listing_ms MS        how long it took (its fetches included)
//! up 1|0               whether it succeeded
//! since UNIX_MS        when the store went up or down
//! fetch_errors N       objects refused or not fetched, since start
//! cache LIMIT BYTES     --cache-size (0: none) and the bytes the cache holds
//! cold N MS BYTES       fetches the server asked for (a cold site's first
//!                       request), their milliseconds and bytes, since start
//! evictions N           packs removed to make room, since start
//! object NAME ETAG SIZE FETCH_MS BYTES FETCHED_UNIX_MS
//! ```
//!
//! `kiln status` reads it too (`crate::status`). A record it does not
//! know is skipped, and an object's last field may be missing (a file
//! written before it was added), so that either side may be newer.
//!
//! Beside it, `hosts`: every `HOST.pack` the bucket holds (`HOST SIZE`, one
//! a line), written atomically after a listing that changed it, so that
//! the server knows a cold site from a host the bucket does not hold.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The hidden folder of the state file and the fetches' temporary files.
pub const DIR: &str = ".kiln-store";
const FILE: &str = "state";
const HOSTS: &str = "hosts";

/// One object mirrored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    /// Its file name (`HOST.pack`, `HOST.crt`, `HOST.key`).
    pub name: String,
    pub etag: String,
    pub size: u64,
    /// How long its last fetch took, and what it fetched.
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    /// When it was fetched (Unix ms; 0 when not known).
    pub fetched_at_ms: u64,
}

/// What the last listing found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The store mirrored (`s3://BUCKET/PREFIX/`) and where it is.
    pub url: String,
    pub place: String,
    pub listed_ms: u64,
    /// How long the last listing took, its fetches included.
    pub listing_ms: u64,
    pub up: bool,
    pub since_ms: u64,
    pub fetch_errors: u64,
    /// `--cache-size` (0: none), and the bytes held.
    pub cache_limit: u64,
    pub cache_bytes: u64,
    /// Fetches asked by the server: how many, their milliseconds, bytes.
    pub cold_fetches: u64,
    pub cold_fetch_ms: u64,
    pub cold_fetch_bytes: u64,
    pub evictions: u64,
    pub objects: Vec<Object>,
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The state file of `cache`.
pub fn path(cache: &Path) -> PathBuf {
    cache.join(DIR).join(FILE)
}

/// The host list of `cache`.
pub fn hosts_path(cache: &Path) -> PathBuf {
    cache.join(DIR).join(HOSTS)
}

/// Writes `text` to `path` whole: a temporary file, synced, renamed.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let temp = path.with_extension("new");
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    std::fs::rename(&temp, path)
}

/// Writes the host list: every host whose pack the bucket holds, with
/// the pack's size.
pub fn write_hosts<'a>(
    cache: &Path,
    hosts: impl IntoIterator<Item = (&'a str, u64)>,
) -> std::io::Result<()> {
    let mut text = String::new();
    for (host, size) in hosts {
        text.push_str(&format!("{host} {size}\n"));
    }
    write_atomically(&hosts_path(cache), &text)
}

/// Reads the host list: `None` when there is none (no listing yet, or no
/// `--cache-size`: every site is fetched).
pub fn read_hosts(cache: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(hosts_path(cache)).ok()?;
    Some(
        text.lines()
            .filter_map(|line| line.split(' ').next())
            .filter(|host| !host.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

impl State {
    /// Writes the state file of `cache` atomically.
    pub fn write(&self, cache: &Path) -> std::io::Result<()> {
        let mut text = format!(
            "store {}\nplace {}\nlisted {}\nlisting_ms {}\nup {}\nsince {}\nfetch_errors {}\n",
            self.url,
            self.place.replace('\n', " "),
            self.listed_ms,
            self.listing_ms,
            u8::from(self.up),
            self.since_ms,
            self.fetch_errors
        );
        text.push_str(&format!(
            "cache {} {}\ncold {} {} {}\nevictions {}\n",
            self.cache_limit,
            self.cache_bytes,
            self.cold_fetches,
            self.cold_fetch_ms,
            self.cold_fetch_bytes,
            self.evictions
        ));
        for o in &self.objects {
            text.push_str(&format!(
                "object {} {} {} {} {} {}\n",
                o.name, o.etag, o.size, o.fetch_ms, o.fetched_bytes, o.fetched_at_ms
            ));
        }
        write_atomically(&path(cache), &text)
    }

    /// Reads the state file of `cache`: `None` before the first listing
    /// (or when it cannot be read).
    pub fn read(cache: &Path) -> Option<State> {
        State::parse(&std::fs::read_to_string(path(cache)).ok()?)
    }

    fn parse(text: &str) -> Option<State> {
        let mut state = State::default();
        for line in text.lines() {
            let rest = line.split_once(' ').map_or("", |(_, rest)| rest);
            let mut fields = line.split(' ');
            let number = |f: Option<&str>| f.and_then(|v| v.parse::<u64>().ok());
            match fields.next()? {
                "store" => state.url = rest.to_string(),
                "place" => state.place = rest.to_string(),
                "listed" => state.listed_ms = number(fields.next())?,
                "listing_ms" => state.listing_ms = number(fields.next())?,
                "up" => state.up = number(fields.next())? == 1,
                "since" => state.since_ms = number(fields.next())?,
                "fetch_errors" => state.fetch_errors = number(fields.next())?,
                "cache" => {
                    state.cache_limit = number(fields.next())?;
                    state.cache_bytes = number(fields.next())?;
                }
                "cold" => {
                    state.cold_fetches = number(fields.next())?;
                    state.cold_fetch_ms = number(fields.next())?;
                    state.cold_fetch_bytes = number(fields.next())?;
                }
                "evictions" => state.evictions = number(fields.next())?,
                "object" => state.objects.push(Object {
                    name: fields.next()?.to_string(),
                    etag: fields.next()?.to_string(),
                    size: number(fields.next())?,
                    fetch_ms: number(fields.next())?,
                    fetched_bytes: number(fields.next())?,
                    fetched_at_ms: number(fields.next()).unwrap_or(0),
                }),
                _ => {}
            }
        }
        Some(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(DIR)).unwrap();
        assert_eq!(State::read(dir.path()), None);
        let state = State {
            url: "s3://sites/prod/".into(),
            place: "sites at http://127.0.0.1:9000".into(),
            listed_ms: 1_700_000_000_000,
            listing_ms: 31,
            up: true,
            since_ms: 1_699_999_999_000,
            fetch_errors: 2,
            cache_limit: 10_000,
            cache_bytes: 1234,
            cold_fetches: 3,
            cold_fetch_ms: 45,
            cold_fetch_bytes: 3702,
            evictions: 1,
            objects: vec![Object {
                name: "example.com.pack".into(),
                etag: "\"abc-1\"".into(),
                size: 1234,
                fetch_ms: 12,
                fetched_bytes: 1234,
                fetched_at_ms: 1_699_999_999_500,
            }],
        };
        state.write(dir.path()).unwrap();
        assert_eq!(State::read(dir.path()), Some(state));
        // A file of an older worker: no store, no fetch time.
        std::fs::write(
            path(dir.path()),
            "listed 5\nup 1\nsince 4\nfetch_errors 0\nobject a.pack \"e\" 3 1 3\n",
        )
        .unwrap();
        let old = State::read(dir.path()).unwrap();
        assert_eq!((old.listed_ms, old.objects[0].fetched_at_ms), (5, 0));
        assert_eq!(read_hosts(dir.path()), None);
        write_hosts(dir.path(), [("a.example", 10), ("b.example", 20)]).unwrap();
        assert_eq!(
            read_hosts(dir.path()),
            Some(vec!["a.example".to_string(), "b.example".to_string()])
        );
    }
}
