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
//! object NAME ETAG SIZE FETCH_MS BYTES FETCHED_UNIX_MS
//! ```
//!
//! `kiln status` reads it too (`crate::status`). A record it does not
//! know is skipped, and an object's last field may be missing (a file
//! written before it was added), so that either side may be newer.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The hidden folder of the state file and the fetches' temporary files.
pub const DIR: &str = ".kiln-store";
const FILE: &str = "state";

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
        for o in &self.objects {
            text.push_str(&format!(
                "object {} {} {} {} {} {}\n",
                o.name, o.etag, o.size, o.fetch_ms, o.fetched_bytes, o.fetched_at_ms
            ));
        }
        let path = path(cache);
        let temp = path.with_extension("new");
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_data()?;
        std::fs::rename(&temp, &path)
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
    }
}
