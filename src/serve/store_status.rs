//! What `/metrics` says of the store beyond its health (`store.rs`'s
//! gauges): which store, mirrored where, up or down since when, the last
//! listing's time and duration, and when each object was fetched. With
//! them a scrape holds all that `kiln status --metrics ADDR` shows.

use std::fmt::Write as _;
use std::path::Path;

use super::metrics::{header, label};
use crate::store::state::State;

/// Unix milliseconds as seconds with a fraction.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The gauges, from the state file of `cache` (at scrape time, on the
/// metrics thread).
pub fn render_metrics(out: &mut String, cache: &Path) {
    let Some(state) = State::read(cache) else {
        return;
    };
    header(
        out,
        "kiln_store_info",
        "gauge",
        "The store mirrored, where it is, and the cache folder served.",
    );
    let _ = writeln!(
        out,
        "kiln_store_info{{url=\"{}\",place=\"{}\",cache=\"{}\"}} 1",
        label(&state.url),
        label(&state.place),
        label(&cache.display().to_string())
    );
    let gauges = [
        (
            "kiln_store_up_since_timestamp_seconds",
            "When the store went up or down (kiln_store_up).",
            state.since_ms,
        ),
        (
            "kiln_store_last_listing_timestamp_seconds",
            "When the last listing of the store ended.",
            state.listed_ms,
        ),
        (
            "kiln_store_last_listing_duration_seconds",
            "How long the last listing took, its fetches included.",
            state.listing_ms,
        ),
    ];
    for (name, help, ms) in gauges {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {}", seconds(ms));
    }
    header(
        out,
        "kiln_store_fetched_timestamp_seconds",
        "gauge",
        "When the object's version served was fetched.",
    );
    for o in &state.objects {
        let _ = writeln!(
            out,
            "kiln_store_fetched_timestamp_seconds{{name=\"{}\"}} {}",
            label(&o.name),
            seconds(o.fetched_at_ms)
        );
    }
}
