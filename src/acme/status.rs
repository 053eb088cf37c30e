//! `kiln acme status`: each managed name's certificate and state, from
//! the status files.

use std::fmt::Write as _;

use anyhow::Context as _;

use super::command::StatusArgs;
use super::layout::{self, Status};

/// A Unix time as the table shows it (RFC 3339, UTC), or `-`.
fn when(unix: Option<i64>) -> String {
    unix.map_or_else(
        || "-".to_owned(),
        |t| {
            let mut out = [0u8; 20];
            crate::httpdate::format_rfc3339(t, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        },
    )
}

/// The table: one line per status file, by name.
pub fn table(statuses: &[Status]) -> String {
    let mut out = String::new();
    let width = statuses
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(
        out,
        "{:width$}  {:20}  {:20}  LAST ERROR",
        "NAME", "EXPIRES", "NEXT ATTEMPT"
    );
    for s in statuses {
        let error = match (&s.last_error, s.last_error_at) {
            (Some(e), Some(at)) => format!("{} ({e})", when(Some(at))),
            (Some(e), None) => e.clone(),
            (None, _) => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:width$}  {:20}  {:20}  {error}",
            s.name,
            when(s.not_after),
            when(s.next_attempt)
        );
    }
    out
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let folder = layout::status_dir(&args.dir);
    let entries = std::fs::read_dir(&folder)
        .with_context(|| format!("{}: no ACME state here", folder.display()))?;
    let mut statuses = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
            match Status::from_json(&text) {
                Some(status) => statuses.push(status),
                None => tracing::warn!("{}: not a status file; skipped", path.display()),
            }
        }
    }
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    crate::report::to_stdout(&table(&statuses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_line_per_name_with_dates_and_the_error() {
        let statuses = [
            Status {
                name: "a.example".into(),
                not_after: Some(1_800_000_000),
                next_attempt: Some(1_790_000_000),
                ..Status::default()
            },
            Status {
                name: "b.example".into(),
                last_error: Some("new account: connection refused".into()),
                last_error_at: Some(1_700_000_000),
                next_attempt: Some(1_700_000_060),
                ..Status::default()
            },
        ];
        let text = table(&statuses);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME"));
        assert!(
            lines[1].starts_with("a.example  2027-01-15T08:00:00Z  2026-09-21T14:13:20Z  -"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains("2023-11-14T22:13:20Z (new account: connection refused)"),
            "{}",
            lines[2]
        );
    }
}
