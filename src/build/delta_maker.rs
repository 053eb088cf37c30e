//! The delta variants of a build (RFC 9842, `docs/dictionaries.md`),
//! made beside the plain compression by a thread of their own
//! (`DeltaMaker`), against the earlier versions the base packs hold, and
//! stored after the plain bodies by `assemble`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use anyhow::Context;

use rayon::prelude::*;

use super::assemble::{AssembleInput, Outcome, Plan, plan_from};
use super::compress::CompressOptions;
use super::source::SourceFile;
use crate::dictionary::DeltaLevels;
use crate::pack::format::DELTA_ENCODINGS;
use crate::pack::{Encoding, RouteKind};

/// The deltas of one group of files: by file index, the BLAKE3 of the
/// bytes they were made from and what was made.
pub(super) type DeltaGroup = Vec<(usize, ([u8; 32], Vec<DeltaMade>))>;

/// A dictionary a delta may be made against: its SHA-256, and its bytes
/// when at hand (`None`: a base's delta carried over, copied or nothing).
type Candidate<'d> = ([u8; 32], Option<&'d [u8]>);

/// Makes delta variants beside the plain compression (see `assemble`).
pub(super) struct DeltaMaker<'a> {
    pub(super) input: &'a AssembleInput<'a>,
    /// The base pack's file, for positioned reads of its bodies.
    pub(super) base_file: Option<Arc<File>>,
    /// The delta encodings with their settings fingerprints.
    pub(super) settings: [(Encoding, u64); 2],
    /// Content bytes a group of files holds at once.
    pub(super) batch_bytes: u64,
}

impl DeltaMaker<'_> {
    /// Makes the deltas of every file `offered` a dictionary, in groups of
    /// files whose bytes (the file and each dictionary) stay within the
    /// batch, each group compressed in parallel and sent, in file order;
    /// stops when the receiver is gone.
    pub(super) fn produce(
        &self,
        files: &[SourceFile],
        offered: &[bool],
        urls: &[Vec<String>],
        made: &std::sync::mpsc::SyncSender<anyhow::Result<DeltaGroup>>,
    ) {
        let versions = self.input.dictionaries.versions as u64;
        let mut start = 0;
        while start < files.len() {
            let (mut end, mut cost) = (start, 0u64);
            while end < files.len() && (end == start || cost <= self.batch_bytes) {
                if offered[end] {
                    cost += files[end].len * (1 + versions);
                }
                end += 1;
            }
            let group: anyhow::Result<DeltaGroup> = (start..end)
                .into_par_iter()
                .filter(|&i| offered[i])
                .map(|i| Ok((i, self.file(&files[i], &urls[i])?)))
                .collect();
            let failed = group.is_err();
            if made.send(group).is_err() || failed {
                return;
            }
            start = end;
        }
    }

    /// The deltas of one file against the last N versions its URLs had:
    /// those the history holds, then those of the base's deltas of these
    /// very bytes (carried over: their dictionaries are gone, the deltas
    /// can be copied); `dcb` and `dcz` against each, in parallel.
    fn file(
        &self,
        file: &SourceFile,
        urls: &[String],
    ) -> anyhow::Result<([u8; 32], Vec<DeltaMade>)> {
        let new = file.read()?;
        let source = *blake3::hash(&new).as_bytes();
        let sha = crate::dictionary::sha256(&new);
        let versions = self.input.dictionaries.versions;
        let mut candidates: Vec<Candidate<'_>> = self
            .input
            .history
            .for_urls(urls, &sha, versions)
            .iter()
            .map(|old| (old.sha256, Some(old.bytes)))
            .collect();
        for dictionary in self.carried_dictionaries(urls, &new) {
            if candidates.len() < versions && !candidates.iter().any(|(d, _)| *d == dictionary) {
                candidates.push((dictionary, None));
            }
        }
        let jobs: Vec<(Candidate<'_>, (Encoding, u64))> = candidates
            .iter()
            .flat_map(|&candidate| self.settings.iter().map(move |&s| (candidate, s)))
            .filter(|&((_, old), (encoding, _))| {
                old.is_none_or(|old| {
                    crate::dictionary::fits(encoding, old.len() as u64, new.len() as u64)
                })
            })
            .collect();
        let made: std::io::Result<Vec<Option<DeltaMade>>> = jobs
            .into_par_iter()
            .map(|((dictionary, old), (encoding, settings))| {
                let key = delta_source_key(&source, &dictionary);
                Ok(self
                    .delta(&key, encoding, settings, &new, old)?
                    .map(|outcome| DeltaMade {
                        encoding,
                        dictionary,
                        key,
                        settings,
                        outcome,
                    }))
            })
            .collect();
        let made = made.with_context(|| format!("{}: delta compression failed", file.shown()))?;
        Ok((source, made.into_iter().flatten().collect()))
    }

    /// The dictionaries the base's deltas of this very content were made
    /// against (the base served `new` at one of `urls`).
    fn carried_dictionaries(&self, urls: &[String], new: &[u8]) -> Vec<[u8; 32]> {
        let Some(base) = self.input.base else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for url in urls {
            let key = super::urlpath::percent_decode(url);
            let Some(route) = base.lookup(RouteKind::Exact, &key) else {
                continue;
            };
            if route.variant(Encoding::Identity).map(|v| v.body) != Some(new) {
                continue;
            }
            for delta in route.deltas() {
                if !out.contains(delta.dictionary) {
                    out.push(*delta.dictionary);
                }
            }
        }
        out
    }

    /// One delta of `new` against the dictionary `old`: the base's body
    /// when it made it with the same settings, else compressed now (kept
    /// or not when stored). `None` when it cannot be made: the base does
    /// not hold it and the dictionary's bytes (`old`) are not at hand.
    fn delta(
        &self,
        key: &[u8; 32],
        encoding: Encoding,
        settings: u64,
        new: &[u8],
        old: Option<&[u8]>,
    ) -> std::io::Result<Option<Outcome>> {
        let mut damaged = false;
        match plan_from(self.input.base, key, encoding, settings) {
            Plan::Reuse(None) => {
                return Ok(Some(Outcome {
                    kept: None,
                    reused: true,
                    damaged: false,
                }));
            }
            Plan::Reuse(Some((off, len, hash))) => {
                let mut bytes = vec![0; len as usize];
                let file = self.base_file.as_ref().expect("a reuse plan has a base");
                file.read_exact_at(&mut bytes, off)?;
                if *blake3::hash(&bytes).as_bytes() == hash {
                    return Ok(Some(Outcome {
                        kept: Some(bytes),
                        reused: true,
                        damaged: false,
                    }));
                }
                damaged = true;
            }
            Plan::Compress => {}
        }
        let Some(old) = old else {
            return Ok(None);
        };
        let levels = DeltaLevels {
            brotli_quality: self.input.compress.brotli_quality,
            zstd_level: self.input.compress.zstd_level,
        };
        Ok(Some(Outcome {
            kept: Some(crate::dictionary::encode(encoding, old, new, levels)?),
            reused: false,
            damaged,
        }))
    }
}

/// A delta is kept only when it is at least this much smaller, in
/// percent, than the file's best plain variant: below that, a client pays
/// for a dictionary lookup for little.
pub const MIN_DELTA_SAVED_PERCENT: u64 = 10;

/// The keep rule of a delta variant (see `MIN_DELTA_SAVED_PERCENT`).
pub(super) fn delta_worth_keeping(best_plain: u64, delta: u64) -> bool {
    delta * 100 <= best_plain * (100 - MIN_DELTA_SAVED_PERCENT)
}

/// One delta variant made for a file, to store in order.
pub(super) struct DeltaMade {
    pub(super) encoding: Encoding,
    /// The dictionary's SHA-256.
    pub(super) dictionary: [u8; 32],
    /// Its provenance key (`delta_source_key`).
    pub(super) key: [u8; 32],
    pub(super) settings: u64,
    pub(super) outcome: Outcome,
}

/// The provenance key of a delta: the BLAKE3 of the source's BLAKE3 and
/// the dictionary's SHA-256, so that the record names both inputs.
pub(super) fn delta_source_key(source: &[u8; 32], dictionary: &[u8; 32]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"kiln delta ");
    hasher.update(source);
    hasher.update(dictionary);
    *hasher.finalize().as_bytes()
}

/// The settings fingerprints of the delta encodings: their levels and
/// window, and the plain encodings' fingerprints, since the keep rule
/// compares a delta with the best plain variant.
pub(super) fn delta_settings(
    opts: &CompressOptions,
    plain: &[(Encoding, u64)],
) -> [(Encoding, u64); 2] {
    let plain: Vec<String> = plain
        .iter()
        .map(|(e, s)| format!("{}={s:x}", e.token()))
        .collect();
    DELTA_ENCODINGS.map(|encoding| {
        let text = format!(
            "{}; {} against a raw dictionary, brotli quality {} window {}, zstd level {}; \
             kept if {MIN_DELTA_SAVED_PERCENT}% under the best of identity, {}",
            super::compress::ENCODER_EPOCH,
            encoding.token(),
            opts.brotli_quality,
            crate::dictionary::DCB_LGWIN,
            opts.zstd_level,
            plain.join(" ")
        );
        (encoding, xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    })
}
