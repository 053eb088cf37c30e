//! The state file `kiln store sync` keeps in the cache folder
//! (`.kiln-store/state`, hidden: the folder-of-sites scan skips it), for
//! the server's `/ready` and `/metrics`. Written whole to a temporary
//! file and renamed after each listing; one record per line, fields
//! separated by spaces:
//!
//! ```text
//! listed UNIX_MS       the end of the last listing
//! up 1|0               whether it succeeded
//! since UNIX_MS        when the store went up or down
//! fetch_errors N       objects refused or not fetched, since start
//! object NAME ETAG SIZE FETCH_MS BYTES
//! ```

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
}

/// What the last listing found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub listed_ms: u64,
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
            "listed {}\nup {}\nsince {}\nfetch_errors {}\n",
            self.listed_ms,
            u8::from(self.up),
            self.since_ms,
            self.fetch_errors
        );
        for o in &self.objects {
            text.push_str(&format!(
                "object {} {} {} {} {}\n",
                o.name, o.etag, o.size, o.fetch_ms, o.fetched_bytes
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
            let mut fields = line.split(' ');
            let number = |f: Option<&str>| f.and_then(|v| v.parse::<u64>().ok());
            match fields.next()? {
                "listed" => state.listed_ms = number(fields.next())?,
                "up" => state.up = number(fields.next())? == 1,
                "since" => state.since_ms = number(fields.next())?,
                "fetch_errors" => state.fetch_errors = number(fields.next())?,
                "object" => state.objects.push(Object {
                    name: fields.next()?.to_string(),
                    etag: fields.next()?.to_string(),
                    size: number(fields.next())?,
                    fetch_ms: number(fields.next())?,
                    fetched_bytes: number(fields.next())?,
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
            listed_ms: 1_700_000_000_000,
            up: true,
            since_ms: 1_699_999_999_000,
            fetch_errors: 2,
            objects: vec![Object {
                name: "example.com.pack".into(),
                etag: "\"abc-1\"".into(),
                size: 1234,
                fetch_ms: 12,
                fetched_bytes: 1234,
            }],
        };
        state.write(dir.path()).unwrap();
        assert_eq!(State::read(dir.path()), Some(state));
    }
}
