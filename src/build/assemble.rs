//! Writes the planned routes into a pack. First the bodies ("firing"): the
//! files are read in source order, in batches whose file data stays within
//! `buffer_bytes` (so that memory does not grow with the site); every
//! distinct compressible content is compressed once per encoding (in
//! parallel within a batch), unless the base pack (the previous build)
//! holds that encoding of the same content made with the same settings,
//! which is then copied instead; bodies are stored in source order. A file
//! too large for a batch goes through the pack in pieces: its identity body
//! is streamed in, and each encoder reads it back from there. Then the
//! header blocks, variant sets, routes and rules. Output never depends on
//! thread scheduling, on the batch size or on the base.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use rayon::prelude::*;

use super::Progress;
use super::compress::{
    BROTLI_PIECE_BYTES, Beside, CompressOptions, Level, encode_br_in_parallel, encode_if_worth,
    encode_to, settings_id, worth_keeping, worth_trying,
};
use super::compressor::{self, Compressor};
use super::cost;
use super::delta_maker::{DeltaGroup, DeltaMaker, delta_settings, delta_worth_keeping};
use super::dictionaries::{
    DictionaryOptions, History, build_id, match_pattern, use_as_dictionary_value,
};
use super::headers::{CachePolicy, VariantHead, etag_for, redirect_head, variant_head};
use super::mime::{content_type, is_compressible};
use super::netlify::{HeaderRule, headers_for};
use super::progress::{self, CountedReader, Counter, Work};
use super::routes::{RoutePlan, Target};
use super::source::SourceFile;
use super::urlpath::{html_escape, percent_encode_path};
use crate::pack::{
    BodyRef, DeltaIn, Encoding, HeadBlock, Pack, PackWriter, ProvenanceIn, RangeReader, RouteIn,
    RouteKind, RuleIn, VariantIn, VariantSet,
};

/// Most files read in one batch, whatever their size: bounds the
/// per-file bookkeeping of a batch of empty or tiny files.
const MAX_BATCH_FILES: usize = 1 << 16;
/// Routes whose header blocks are made at once, in parallel.
const ROUTE_CHUNK: usize = 4096;

/// Bodies written per encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodingTotals {
    /// Distinct bodies stored.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What `assemble` wrote besides what the pack writer counts.
#[derive(Debug, Default)]
pub struct Assembled {
    /// Indexed by `Encoding as usize`, delta encodings included.
    pub per_encoding: [EncodingTotals; 6],
    /// Encoded bytes of duplicate contents, never handed to the writer
    /// (their first copy's bodies are reused).
    pub dedup_saved: u64,
    /// Encodings compressed by this build.
    pub compressed: u64,
    /// Encodings taken from the base pack instead (kept bodies copied,
    /// and those that were not worth keeping then).
    pub reused: u64,
    /// Set when a body of the base did not match its recorded hash (it was
    /// compressed again): one line for the user.
    pub base_damage: Option<String>,
}

/// Everything `assemble` needs besides the files and the plan.
pub struct AssembleInput<'a> {
    /// Which encodings to produce, how hard.
    pub compress: &'a CompressOptions,
    /// `Cache-Control` values per kind of file.
    pub cache: &'a CachePolicy,
    /// The parsed `_headers` (empty when absent or disabled).
    pub header_rules: &'a [HeaderRule],
    /// How the compression's progress shows on stderr.
    pub progress: Progress,
    /// File data held in memory at once: a batch's contents and their
    /// encoded variants. A file that alone needs more is streamed.
    pub buffer_bytes: u64,
    /// The pack of the previous build, whose encoded bodies are reused.
    pub base: Option<&'a Pack>,
    /// The pack being written, as messages name it.
    pub out_name: &'a str,
    /// `Use-As-Dictionary` and delta variants.
    pub dictionaries: &'a DictionaryOptions,
    /// The earlier versions the deltas are made against.
    pub history: &'a History<'a>,
}

/// The stored bodies of one file: identity first, then kept encodings.
type FileBodies = Vec<(Encoding, BodyRef)>;

/// One stored delta variant of a file.
#[derive(Clone, Copy)]
struct DeltaBody {
    encoding: Encoding,
    /// The dictionary's SHA-256.
    dictionary: [u8; 32],
    body: BodyRef,
}

/// A variant set is shared by the routes serving the same file with the
/// same validators flag, the same custom headers and the same
/// `Use-As-Dictionary` value.
type SetKey = (usize, bool, Vec<(String, String)>, Option<String>);

/// What a route needs written, made in parallel with other routes'.
enum Prepared {
    /// A file (its index): its `_headers` fields, and its variants' header
    /// blocks.
    File {
        /// Index of the file.
        file: usize,
        /// Fields from `_headers`.
        custom: Vec<(String, String)>,
        /// One per stored body, in `Encoding` order.
        heads: Vec<HeadBlock>,
        /// One per delta variant, in the order of the file's deltas.
        delta_heads: Vec<HeadBlock>,
        /// The `Use-As-Dictionary` value of the route.
        use_as_dictionary: Option<String>,
    },
    /// A redirect: the page kiln serves with it, and its header block.
    Redirect {
        /// The page's HTML.
        page: String,
        /// Its header block (`Location` included).
        head: HeadBlock,
    },
}

/// How to obtain one encoding of one content in a batch.
#[derive(Clone, Copy)]
pub(super) enum Plan {
    /// Compress it.
    Compress,
    /// The base tried it with the same settings: copy its body (offset,
    /// length, BLAKE3), or nothing when it was not worth keeping.
    Reuse(Option<(u64, u64, [u8; 32])>),
}

/// What the first pass found (see `Firing::plan_compression`).
struct CompressionPlan {
    /// The encodings to compress, in file order.
    jobs: Vec<compressor::Job>,
    /// What is reused and what is compressed.
    work: Work,
    /// By file: the hash the first pass read, for the files it hashed.
    first_hashes: Vec<Option<[u8; 32]>>,
}

/// One encoding of one content of a batch, to copy from the base.
struct Reuse {
    /// Index of the content in the batch.
    at: usize,
    /// The encoding.
    encoding: Encoding,
    /// The base's body (offset, length, BLAKE3), or `None` when it was not
    /// worth keeping.
    body: Option<(u64, u64, [u8; 32])>,
}

/// What a job obtained.
pub(super) struct Outcome {
    /// The encoded body, when worth keeping.
    pub(super) kept: Option<Vec<u8>>,
    /// It came from the base.
    pub(super) reused: bool,
    /// The base's body did not match its hash (and was compressed again).
    pub(super) damaged: bool,
}

/// The state of the firing of bodies.
struct Firing<'a> {
    /// Settings, base and names.
    input: &'a AssembleInput<'a>,
    /// The encodings to try, in `Encoding` order, with their settings
    /// fingerprints.
    encodings: Vec<(Encoding, u64)>,
    /// The base pack's file, for positioned reads of its bodies.
    base_file: Option<Arc<File>>,
    /// Encoded bodies of each compressible content already written, by
    /// hash: a later copy of the content reuses them without compressing
    /// again.
    encoded: HashMap<[u8; 32], FileBodies>,
    /// The counts so far.
    result: Assembled,
    /// The progress (its bar hidden unless on a terminal).
    counter: &'a Counter,
    /// Content bytes a batch holds at once; a file whose cost is more is
    /// streamed.
    batch_bytes: u64,
}

/// Writes the bodies, variant sets, routes and rules of `plan` into
/// `writer`; the caller finishes the pack.
pub fn assemble(
    files: &[SourceFile],
    plan: &RoutePlan,
    input: &AssembleInput<'_>,
    writer: &mut PackWriter,
) -> anyhow::Result<Assembled> {
    let types: Vec<String> = files.iter().map(|f| content_type(&f.path)).collect();
    let write_err = || format!("{}: cannot write", input.out_name);
    let mut encodings: Vec<Encoding> = input.compress.encodings.clone();
    encodings.retain(|e| *e != Encoding::Identity);
    encodings.sort();
    encodings.dedup();
    let base_file = match input.base {
        Some(base) => {
            let file = base
                .file()
                .ok_or_else(|| std::io::Error::other("its descriptor was closed"))
                .and_then(std::fs::File::try_clone);
            Some(Arc::new(file.with_context(|| {
                format!("{}: cannot read", base.path().display())
            })?))
        }
        None => None,
    };
    let counter = Counter::new();
    // Half the buffer for the batches the writer reads, half for the
    // background compression.
    let half = (input.buffer_bytes / 2).max(1);
    let mut firing = Firing {
        input,
        encodings: encodings
            .iter()
            .map(|&e| (e, settings_id(e, input.compress)))
            .collect(),
        base_file,
        encoded: HashMap::new(),
        result: Assembled::default(),
        counter: &counter,
        batch_bytes: half,
    };
    let wants: Vec<bool> = files
        .iter()
        .zip(&types)
        .map(|(f, t)| !encodings.is_empty() && is_compressible(t) && worth_trying(f.len))
        .collect();
    let CompressionPlan {
        jobs,
        work,
        first_hashes,
    } = firing.plan_compression(files, &wants)?;
    progress::show(&counter, input.progress, &work);
    // Already at the fastest levels: no note suggests them.
    let fast = *input.compress
        == CompressOptions {
            encodings: input.compress.encodings.clone(),
            ..CompressOptions::at(Level::Fast)
        };
    let compressor = Compressor::new(files, input.compress, &counter, jobs, half);
    // The URLs each file answers at, as a client names them.
    let mut urls: Vec<Vec<String>> = vec![Vec::new(); files.len()];
    for route in &plan.routes {
        if let (Target::File(i), RouteKind::Exact) = (&route.target, route.kind) {
            urls[*i].push(percent_encode_path(&route.key));
        }
    }
    let offered: Vec<bool> = wants
        .iter()
        .map(|&w| w && input.dictionaries.enabled)
        .collect();
    // Deltas need an earlier version: one the history holds, or a delta
    // of the base to carry over.
    let earlier = !input.history.is_empty()
        || input
            .base
            .is_some_and(|base| base.routes().any(|r| r.delta_count() > 0));
    let maker = DeltaMaker {
        input,
        base_file: firing.base_file.clone(),
        settings: delta_settings(input.compress, &firing.encodings),
        batch_bytes: half,
    };
    // Dropped when the bodies are written: ends the progress lines.
    let (written, wait) = std::sync::mpsc::channel::<()>();
    let (bodies, deltas) = std::thread::scope(|scope| {
        if input.progress != Progress::Silent && work.compressed_bytes > 0 {
            let (counter, work) = (&counter, &work);
            scope.spawn(move || progress::watch(counter, input.progress, work, fast, &wait));
        }
        if !compressor.is_idle() {
            let mut workers = 0;
            for i in 0..rayon::current_num_threads().max(1) {
                let started = std::thread::Builder::new()
                    .name(format!("kiln-compress-{i}"))
                    .spawn_scoped(scope, || compressor.work());
                workers += usize::from(started.is_ok());
            }
            if workers == 0 {
                bail!("cannot start a compression thread");
            }
        }
        // The deltas are made beside the plain bodies (a group of files
        // ahead at most: the channel holds one), so that the cores the
        // plain compression leaves idle make them; they are stored after.
        let (made, deltas_made) = std::sync::mpsc::sync_channel(1);
        if input.dictionaries.enabled && earlier {
            let (maker, offered, urls) = (&maker, &offered, &urls);
            let started = std::thread::Builder::new()
                .name("kiln-deltas".into())
                .spawn_scoped(scope, move || maker.produce(files, offered, urls, &made));
            if started.is_err() {
                bail!("cannot start the delta thread");
            }
        } else {
            drop(made);
        }
        // Dropped however the writer ends, so that no worker waits on.
        let _stop = compressor.stop_on_drop();
        let bodies = firing.fire_all(writer, files, &wants, &first_hashes, &compressor);
        drop(written);
        let bodies = bodies?;
        let deltas = firing.store_deltas(writer, files, &bodies, &deltas_made)?;
        Ok((bodies, deltas))
    })?;
    counter.bar.finish_and_clear();
    release_batch_memory();
    let id = build_id(
        files
            .iter()
            .zip(&bodies)
            .map(|(f, b)| (f.path.clone(), b[0].1.hash)),
    );
    let mut result = firing.result;
    let mut sets: HashMap<SetKey, VariantSet> = HashMap::new();
    for chunk in plan.routes.chunks(ROUTE_CHUNK) {
        // The header blocks are made in parallel, stored in order.
        let prepared: Vec<Prepared> = chunk
            .par_iter()
            .map(|route| match &route.target {
                Target::File(i) => {
                    let custom = headers_for(input.header_rules, &plan.headers_paths(route));
                    let use_as_dictionary = (offered[*i] && route.validators()).then(|| {
                        let url = percent_encode_path(&route.key);
                        use_as_dictionary_value(&match_pattern(&url), &id)
                    });
                    let file = FileHeads {
                        file: &files[*i],
                        content_type: &types[*i],
                        validators: route.validators(),
                        custom: &custom,
                        cache: input.cache,
                        use_as_dictionary: use_as_dictionary.as_deref(),
                        several: bodies[*i].len() > 1,
                        has_deltas: !deltas[*i].is_empty(),
                    };
                    let heads = file.heads(bodies[*i].iter().map(|(e, b)| (*e, b)));
                    let delta_heads = file.heads(deltas[*i].iter().map(|d| (d.encoding, &d.body)));
                    Prepared::File {
                        file: *i,
                        custom,
                        heads,
                        delta_heads,
                        use_as_dictionary,
                    }
                }
                Target::Redirect(location) => {
                    let escaped = html_escape(location);
                    let page = format!(
                        "<!doctype html><title>Moved</title><a href=\"{escaped}\">{escaped}</a>\n"
                    );
                    let head =
                        redirect_head(location, &input.cache.for_redirect(), page.len() as u64);
                    Prepared::Redirect { page, head }
                }
            })
            .collect();
        for (route, prepared) in chunk.iter().zip(prepared) {
            let validators = route.validators();
            let (set, last_modified) = match prepared {
                Prepared::File {
                    file: i,
                    custom,
                    heads,
                    delta_heads,
                    use_as_dictionary,
                } => {
                    let cache_key = (i, validators, custom, use_as_dictionary);
                    let set = match sets.get(&cache_key) {
                        Some(set) => *set,
                        None => {
                            let variants: Vec<VariantIn<'_>> = bodies[i]
                                .iter()
                                .zip(&heads)
                                .map(|((encoding, body), head)| VariantIn {
                                    encoding: *encoding,
                                    head,
                                    body: *body,
                                })
                                .collect();
                            let delta_variants: Vec<DeltaIn<'_>> = deltas[i]
                                .iter()
                                .zip(&delta_heads)
                                .map(|(d, head)| DeltaIn {
                                    encoding: d.encoding,
                                    dictionary: d.dictionary,
                                    head,
                                    body: d.body,
                                })
                                .collect();
                            let set = writer
                                .add_variant_set_with_deltas(&variants, &delta_variants)
                                .with_context(write_err)?;
                            sets.insert(cache_key, set);
                            set
                        }
                    };
                    (set, files[i].mtime)
                }
                Prepared::Redirect { page, head } => {
                    let body = writer.add_body(page.as_bytes()).with_context(write_err)?;
                    count_fresh(&mut result.per_encoding, Encoding::Identity, &body);
                    let set = writer
                        .add_variant_set(&[VariantIn {
                            encoding: Encoding::Identity,
                            head: &head,
                            body,
                        }])
                        .with_context(write_err)?;
                    (set, 0)
                }
            };
            writer
                .add_route(RouteIn {
                    kind: route.kind,
                    key: &route.key,
                    status: route.status,
                    last_modified,
                    variants: set,
                    validators,
                })
                .with_context(write_err)?;
        }
    }
    for rule in &plan.rules {
        writer.add_rule(RuleIn {
            from: &rule.from,
            to: rule.to.as_bytes(),
            status: rule.status,
            force: rule.force,
        });
    }
    Ok(result)
}

/// Hands the memory of the last batches back to the system. Their buffers
/// were allocated by the reading threads, in their own malloc arenas, and
/// the tables that grow next are allocated by this thread in another: kept,
/// the freed buffers would count twice in the peak.
fn release_batch_memory() {
    crate::sys::release_free_memory();
}

/// Counts a body just stored, if it is not a duplicate.
fn count_fresh(totals: &mut [EncodingTotals; 6], encoding: Encoding, body: &BodyRef) {
    if body.fresh {
        let t = &mut totals[encoding as usize];
        t.count += 1;
        t.bytes += body.len;
    }
}

impl Firing<'_> {
    /// Fires every file, in order: batches read whole, and the files too
    /// large for one streamed.
    fn fire_all(
        &mut self,
        writer: &mut PackWriter,
        files: &[SourceFile],
        wants: &[bool],
        first_hashes: &[Option<[u8; 32]>],
        compressor: &Compressor<'_>,
    ) -> anyhow::Result<Vec<FileBodies>> {
        let mut bodies: Vec<FileBodies> = Vec::with_capacity(files.len());
        let mut start = 0;
        while start < files.len() {
            if self.cost(&files[start], wants[start]) > self.batch_bytes {
                bodies.push(self.fire_streamed(writer, &files[start], wants[start])?);
                start += 1;
                continue;
            }
            let mut end = start;
            let mut cost = 0;
            while end < files.len() && end - start < MAX_BATCH_FILES {
                let next = self.cost(&files[end], wants[end]);
                if end > start && cost + next > self.batch_bytes {
                    break;
                }
                cost += next;
                end += 1;
            }
            bodies.extend(self.fire_batch(
                writer,
                &files[start..end],
                &wants[start..end],
                &first_hashes[start..end],
                compressor,
            )?);
            start = end;
        }
        Ok(bodies)
    }

    /// The first pass: hashes every compressible file a batch would hold
    /// (the streamed ones are compressed as they are written) and lists, in
    /// file order, each encoding of each distinct content to compress: those
    /// the base cannot give. Also the hash of each file hashed, which the
    /// writer must find again (else the file changed in between).
    fn plan_compression(
        &self,
        files: &[SourceFile],
        wants: &[bool],
    ) -> anyhow::Result<CompressionPlan> {
        let batchable: Vec<usize> = (0..files.len())
            .filter(|&i| wants[i] && self.cost(&files[i], true) <= self.batch_bytes)
            .collect();
        let mut hashes = Vec::with_capacity(batchable.len());
        let mut start = 0;
        while start < batchable.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < batchable.len()
                && (end == start || bytes + files[batchable[end]].len <= self.batch_bytes)
            {
                bytes += files[batchable[end]].len;
                end += 1;
            }
            let chunk: Vec<[u8; 32]> = batchable[start..end]
                .par_iter()
                .map(|&i| files[i].read().map(|c| *blake3::hash(&c).as_bytes()))
                .collect::<anyhow::Result<_>>()?;
            hashes.extend(chunk);
            start = end;
        }
        let mut seen = HashSet::new();
        let mut jobs = Vec::new();
        let mut work = Work::default();
        let mut first_hashes = vec![None; files.len()];
        for (&file, hash) in batchable.iter().zip(hashes) {
            first_hashes[file] = Some(hash);
            if !seen.insert(hash) {
                continue;
            }
            for &(encoding, settings) in &self.encodings {
                if matches!(self.plan(&hash, encoding, settings), Plan::Compress) {
                    jobs.push(compressor::Job {
                        file,
                        hash,
                        encoding,
                    });
                    work.compressed_bodies += 1;
                    work.compressed_bytes += files[file].len;
                    work.compressed_cost +=
                        cost::body(encoding, files[file].len, self.input.compress);
                } else {
                    work.reused_bodies += 1;
                    work.reused_bytes += files[file].len;
                }
            }
        }
        // A file too large for a batch is hashed as it is stored: counted
        // as compressed with every encoding, taken off the count when it
        // turns out reused.
        for (file, _) in files
            .iter()
            .zip(wants)
            .filter(|&(f, &w)| w && self.cost(f, true) > self.batch_bytes)
        {
            work.compressed_bodies += self.encodings.len() as u64;
            work.compressed_bytes += file.len * self.encodings.len() as u64;
            work.compressed_cost += self.all_encodings_cost(file.len);
        }
        Ok(CompressionPlan {
            jobs,
            work,
            first_hashes,
        })
    }

    /// The cost of making every encoding of a file of `len` bytes.
    fn all_encodings_cost(&self, len: u64) -> u64 {
        self.encodings
            .iter()
            .map(|&(e, _)| cost::body(e, len, self.input.compress))
            .sum()
    }

    /// File data a file holds in memory while it is fired: its content and
    /// at most as much again per encoding tried.
    fn cost(&self, file: &SourceFile, wants: bool) -> u64 {
        let copies = if wants { 1 + self.encodings.len() } else { 1 };
        file.len.saturating_mul(copies as u64)
    }

    /// How to obtain `encoding` (with settings fingerprint `settings`) of
    /// the content whose BLAKE3 is `hash`: from the base if it tried the
    /// same, else by compressing.
    fn plan(&self, hash: &[u8; 32], encoding: Encoding, settings: u64) -> Plan {
        plan_from(self.input.base, hash, encoding, settings)
    }

    /// Fires the files of one batch, read whole, stored in order: the
    /// encodings the base gives are copied (read in parallel), the others
    /// taken from the background compression.
    fn fire_batch(
        &mut self,
        writer: &mut PackWriter,
        files: &[SourceFile],
        wants: &[bool],
        first_hashes: &[Option<[u8; 32]>],
        compressor: &Compressor<'_>,
    ) -> anyhow::Result<Vec<FileBodies>> {
        let contents: Vec<Vec<u8>> = files
            .par_iter()
            .map(SourceFile::read)
            .collect::<anyhow::Result<_>>()?;
        let hashes: Vec<[u8; 32]> = contents
            .par_iter()
            .map(|c| *blake3::hash(c).as_bytes())
            .collect();
        for (at, first) in first_hashes.iter().enumerate() {
            if first.is_some_and(|h| h != hashes[at]) {
                bail!("{}: changed during the build", files[at].shown());
            }
        }
        let mut reuses = Vec::new();
        let mut planned = HashSet::new();
        for at in 0..contents.len() {
            if !wants[at] {
                continue;
            }
            if self.encoded.contains_key(&hashes[at]) || !planned.insert(hashes[at]) {
                continue;
            }
            for &(encoding, settings) in &self.encodings {
                if let Plan::Reuse(body) = self.plan(&hashes[at], encoding, settings) {
                    reuses.push(Reuse { at, encoding, body });
                }
            }
        }
        let outcomes: Vec<anyhow::Result<Outcome>> = reuses
            .par_iter()
            .map(|reuse| {
                let outcome = self.reuse(reuse, &contents[reuse.at]).with_context(|| {
                    format!(
                        "{}: {} compression failed",
                        files[reuse.at].shown(),
                        reuse.encoding.token()
                    )
                })?;
                Ok(outcome)
            })
            .collect();
        let mut by_content: HashMap<([u8; 32], Encoding), Outcome> = HashMap::new();
        for (reuse, outcome) in reuses.iter().zip(outcomes) {
            by_content.insert((hashes[reuse.at], reuse.encoding), outcome?);
        }
        let mut fired = Vec::with_capacity(files.len());
        for (at, content) in contents.iter().enumerate() {
            let identity = self.store(writer, Encoding::Identity, content, Some(hashes[at]))?;
            let mut set = vec![(Encoding::Identity, identity)];
            if wants[at] {
                if let Some(done) = self.encoded.get(&hashes[at]) {
                    self.result.dedup_saved += done.iter().map(|(_, b)| b.len).sum::<u64>();
                    set.extend_from_slice(done);
                } else {
                    let mut done = Vec::new();
                    for &(encoding, settings) in &self.encodings.clone() {
                        let outcome = match by_content.remove(&(hashes[at], encoding)) {
                            Some(outcome) => outcome,
                            None => Outcome {
                                // No job for it: the first pass read other bytes.
                                kept: compressor.take(&hashes[at], encoding).ok_or_else(
                                    || anyhow!("{}: changed during the build", files[at].shown()),
                                )??,
                                reused: false,
                                damaged: false,
                            },
                        };
                        self.count(outcome.reused, outcome.damaged);
                        let body = match &outcome.kept {
                            Some(bytes) => Some(self.store(writer, encoding, bytes, None)?),
                            None => None,
                        };
                        writer.add_provenance(ProvenanceIn {
                            source_hash: hashes[at],
                            encoding,
                            settings,
                            body,
                        });
                        done.extend(body.map(|b| (encoding, b)));
                    }
                    set.extend_from_slice(&done);
                    self.encoded.insert(hashes[at], done);
                }
            }
            fired.push(set);
        }
        Ok(fired)
    }

    /// Stores the deltas `made` sends, group by group in file order, after
    /// the plain bodies: a body compressed now only when at least
    /// `MIN_DELTA_SAVED_PERCENT` smaller than the file's best plain variant
    /// (one copied from the base passed the same rule), each with its
    /// provenance record.
    fn store_deltas(
        &mut self,
        writer: &mut PackWriter,
        files: &[SourceFile],
        bodies: &[FileBodies],
        made: &std::sync::mpsc::Receiver<anyhow::Result<DeltaGroup>>,
    ) -> anyhow::Result<Vec<Vec<DeltaBody>>> {
        let mut stored = vec![Vec::new(); bodies.len()];
        // The sender is gone once every group is sent (or none is made).
        for group in made.iter() {
            for (i, (source, deltas)) in group? {
                if source != bodies[i][0].1.hash {
                    bail!("{}: changed during the build", files[i].shown());
                }
                let best_plain = bodies[i].iter().map(|(_, b)| b.len).min().unwrap_or(0);
                for m in deltas {
                    self.count(m.outcome.reused, m.outcome.damaged);
                    let kept = m.outcome.kept.filter(|body| {
                        m.outcome.reused || delta_worth_keeping(best_plain, body.len() as u64)
                    });
                    let body = match &kept {
                        Some(bytes) => Some(self.store(writer, m.encoding, bytes, None)?),
                        None => None,
                    };
                    writer.add_provenance(ProvenanceIn {
                        source_hash: m.key,
                        encoding: m.encoding,
                        settings: m.settings,
                        body,
                    });
                    stored[i].extend(body.map(|body| DeltaBody {
                        encoding: m.encoding,
                        dictionary: m.dictionary,
                        body,
                    }));
                }
            }
        }
        Ok(stored)
    }

    /// Copies one encoding from the base, or, when the base's body does
    /// not match its hash (damage), compresses it.
    fn reuse(&self, reuse: &Reuse, content: &[u8]) -> std::io::Result<Outcome> {
        let Some((off, len, hash)) = reuse.body else {
            return Ok(Outcome {
                kept: None,
                reused: true,
                damaged: false,
            });
        };
        let mut bytes = vec![0; len as usize];
        let file = self.base_file.as_ref().expect("a reuse plan has a base");
        file.read_exact_at(&mut bytes, off)?;
        if *blake3::hash(&bytes).as_bytes() == hash {
            return Ok(Outcome {
                kept: Some(bytes),
                reused: true,
                damaged: false,
            });
        }
        Ok(Outcome {
            kept: encode_if_worth(content, reuse.encoding, self.input.compress)?,
            reused: false,
            damaged: true,
        })
    }

    /// Counts one encoding obtained: `reused` from the base, or
    /// compressed (after the base's body turned out `damaged`).
    fn count(&mut self, reused: bool, damaged: bool) {
        if reused {
            self.result.reused += 1;
        } else {
            self.result.compressed += 1;
        }
        if damaged && self.result.base_damage.is_none() {
            let base = self.input.base.map(|b| b.path().display().to_string());
            self.result.base_damage = Some(format!(
                "{}: a stored body does not match its recorded hash; the pack is damaged, \
                 its bodies were compressed again where they did not match",
                base.unwrap_or_default()
            ));
        }
    }

    /// Stores one body of a batch; `hash` is its BLAKE3 when known.
    fn store(
        &mut self,
        writer: &mut PackWriter,
        encoding: Encoding,
        bytes: &[u8],
        hash: Option<[u8; 32]>,
    ) -> anyhow::Result<BodyRef> {
        let body = match hash {
            Some(hash) => writer.add_hashed_body(bytes, hash),
            None => writer.add_body(bytes),
        }
        .with_context(|| format!("{}: cannot write", self.input.out_name))?;
        count_fresh(&mut self.result.per_encoding, encoding, &body);
        Ok(body)
    }

    /// Fires one file too large for a batch, in pieces: its identity body
    /// is streamed into the pack, and each encoding is made by reading it
    /// back from there (or copied from the base).
    fn fire_streamed(
        &mut self,
        writer: &mut PackWriter,
        file: &SourceFile,
        wants: bool,
    ) -> anyhow::Result<FileBodies> {
        let write_err = || format!("{}: cannot write", self.input.out_name);
        let mut counted = CountingReader {
            inner: file.open()?,
            read: 0,
        };
        let identity = writer
            .add_body_from(&mut counted)
            .with_context(|| format!("{}: cannot read or store", file.shown()))?;
        file.finish_read(counted.read)?;
        count_fresh(&mut self.result.per_encoding, Encoding::Identity, &identity);
        let mut set = vec![(Encoding::Identity, identity)];
        if !wants {
            return Ok(set);
        }
        let hash = identity.hash;
        if let Some(done) = self.encoded.get(&hash) {
            self.result.dedup_saved += done.iter().map(|(_, b)| b.len).sum::<u64>();
            // Counted as work to do: none is.
            self.counter.forget(
                file.len * self.encodings.len() as u64,
                self.all_encodings_cost(file.len),
            );
            set.extend_from_slice(done);
            return Ok(set);
        }
        let encodings = self.encodings.clone();
        let mut plans: Vec<Plan> = encodings
            .iter()
            .map(|&(encoding, settings)| self.plan(&hash, encoding, settings))
            .collect();
        let mut damaged = vec![false; encodings.len()];
        // The brotli body comes first (`Encoding` order): copied before
        // the others are made, or made in pieces straight into the pack
        // while the others are made beside it (`compress_streamed`).
        let mut copied_br = None;
        if encodings.first().is_some_and(|&(e, _)| e == Encoding::Br)
            && let Plan::Reuse(Some((off, len, body_hash))) = plans[0]
        {
            match self
                .copy_from_base(writer, off, len, &body_hash)
                .with_context(write_err)?
            {
                Some(body) => copied_br = Some(body),
                None => (plans[0], damaged[0]) = (Plan::Compress, true),
            }
        }
        let to_make: Vec<Encoding> = encodings
            .iter()
            .zip(&plans)
            .filter(|(_, plan)| matches!(plan, Plan::Compress))
            .map(|(&(encoding, _), _)| encoding)
            .collect();
        let streaming = Streaming {
            input: self.input,
            counter: self.counter,
            memory: self.batch_bytes,
        };
        let mut made =
            compress_streamed(writer, file, &identity, &to_make, &streaming)?.into_iter();
        let mut done = Vec::new();
        for (i, &(encoding, settings)) in encodings.iter().enumerate() {
            let (body, reused) = match plans[i] {
                Plan::Reuse(None) => (None, true),
                Plan::Reuse(Some(_)) if i == 0 && copied_br.is_some() => (copied_br, true),
                Plan::Reuse(Some((off, len, body_hash))) => {
                    match self
                        .copy_from_base(writer, off, len, &body_hash)
                        .with_context(write_err)?
                    {
                        Some(body) => (Some(body), true),
                        None => {
                            damaged[i] = true;
                            let again = compress_streamed(
                                writer,
                                file,
                                &identity,
                                &[encoding],
                                &streaming,
                            )?
                            .pop()
                            .ok_or_else(|| anyhow!("a body was not made"))?;
                            (store_made(writer, again, identity.len, self.input)?, false)
                        }
                    }
                }
                Plan::Compress => {
                    let one = made.next().ok_or_else(|| anyhow!("a body was not made"))?;
                    (store_made(writer, one, identity.len, self.input)?, false)
                }
            };
            if reused {
                self.counter.forget(
                    file.len,
                    cost::body(encoding, file.len, self.input.compress),
                );
            }
            self.count(reused, damaged[i]);
            if let Some(b) = &body {
                count_fresh(&mut self.result.per_encoding, encoding, b);
            }
            writer.add_provenance(ProvenanceIn {
                source_hash: hash,
                encoding,
                settings,
                body,
            });
            done.extend(body.map(|b| (encoding, b)));
        }
        set.extend_from_slice(&done);
        self.encoded.insert(hash, done);
        Ok(set)
    }

    /// Copies a body of the base into the pack, in pieces, after checking
    /// it against its recorded BLAKE3; `None` (nothing written) when it
    /// does not match.
    fn copy_from_base(
        &self,
        writer: &mut PackWriter,
        off: u64,
        len: u64,
        hash: &[u8; 32],
    ) -> std::io::Result<Option<BodyRef>> {
        let file = self.base_file.as_ref().expect("a reuse plan has a base");
        let mut hasher = blake3::Hasher::new();
        std::io::copy(
            &mut RangeReader::new(Arc::clone(file), off, len),
            &mut hasher,
        )?;
        if hasher.finalize().as_bytes() != hash {
            return Ok(None);
        }
        writer
            .add_body_from(&mut RangeReader::new(Arc::clone(file), off, len))
            .map(Some)
    }
}

/// How to obtain `encoding` (with settings fingerprint `settings`) of the
/// content whose provenance key is `hash`: from `base` if it tried the
/// same, else by compressing.
pub(super) fn plan_from(
    base: Option<&Pack>,
    hash: &[u8; 32],
    encoding: Encoding,
    settings: u64,
) -> Plan {
    let Some(base) = base else {
        return Plan::Compress;
    };
    match base.provenance(hash, encoding) {
        Some(p) if p.settings == settings => {
            Plan::Reuse(p.body.map(|(off, len, body_hash)| (off, len, *body_hash)))
        }
        _ => Plan::Compress,
    }
}

/// What compressing a streamed file needs besides the writer.
struct Streaming<'a> {
    input: &'a AssembleInput<'a>,
    /// Advanced by the bytes compressed, at their cost.
    counter: &'a Counter,
    /// Bytes of made brotli pieces that may wait for the writer
    /// (`InParallel::waiting`): the writer's half of the buffer, which
    /// holds no batch meanwhile.
    memory: u64,
}

/// An encoding of a streamed file, made.
enum Made {
    /// Stored in the pack already, or cut off as not worth keeping.
    Stored(Option<BodyRef>),
    /// In a scratch file of this many bytes, to store.
    Spilled(File, u64),
}

/// Makes `encodings` of a file's identity body, already stored as
/// `identity`, by reading it back from the pack in pieces, all at once on
/// every core: a brotli body made of several pieces (first, when there is
/// one) goes straight into the pack, its pieces on every thread
/// (`encode_br_in_parallel`); the others are made beside it, each on a
/// thread, into scratch files, so that the pack still gets its bodies in
/// `Encoding` order, whichever ends first. In the order of `encodings`.
fn compress_streamed(
    writer: &mut PackWriter,
    file: &SourceFile,
    identity: &BodyRef,
    encodings: &[Encoding],
    streaming: &Streaming<'_>,
) -> anyhow::Result<Vec<Made>> {
    use super::compress::InParallel;
    use std::io::{BufReader, BufWriter, Write as _};

    if encodings.is_empty() {
        return Ok(Vec::new());
    }
    let input = streaming.input;
    let write_err = || format!("{}: cannot write", input.out_name);
    let stored = writer.stored_file().with_context(write_err)?;
    let in_pieces = encodings.first() == Some(&Encoding::Br) && identity.len > BROTLI_PIECE_BYTES;
    let beside = &encodings[usize::from(in_pieces)..];
    let scratch: Vec<File> = beside
        .iter()
        .map(|_| writer.scratch_file())
        .collect::<std::io::Result<_>>()
        .with_context(write_err)?;
    let jobs: Vec<Beside<'_>> = beside
        .iter()
        .zip(&scratch)
        .map(|(&encoding, spill)| {
            let stored = Arc::clone(&stored);
            let (off, len) = (identity.off, identity.len);
            Box::new(move || {
                // Counted as it is read, so that a long encoding moves the
                // progress lines too, not only at its end.
                let mut source = CountedReader {
                    inner: BufReader::with_capacity(1 << 20, RangeReader::new(stored, off, len)),
                    counter: streaming.counter,
                    per_byte: cost::per_byte(encoding, len, input.compress),
                };
                let mut out = BufWriter::with_capacity(1 << 20, spill);
                encode_to(&mut source, len, encoding, input.compress, &mut out)
                    .and_then(|()| out.flush())
                    .map_err(|e| {
                        std::io::Error::other(format!(
                            "{} compression failed: {e}",
                            encoding.token()
                        ))
                    })
            }) as Beside<'_>
        })
        .collect();
    let threads = rayon::current_num_threads().max(1);
    let fail = |e: std::io::Error| anyhow!("{}: {e}", file.shown());
    let mut made = Vec::with_capacity(encodings.len());
    if in_pieces {
        let read = |at: u64, n: usize| {
            let mut bytes = vec![0; n];
            stored.read_exact_at(&mut bytes, identity.off + at)?;
            Ok(bytes)
        };
        let mut body = writer.body_writer();
        encode_br_in_parallel(
            &read,
            identity.len,
            input.compress,
            InParallel {
                threads,
                waiting: streaming.memory,
                beside: jobs,
            },
            &|piece, n| {
                let per_byte = cost::brotli_piece_per_byte(piece, identity.len, input.compress);
                streaming.counter.add(n, n * per_byte);
            },
            &mut body,
        )
        .map_err(fail)?;
        made.push(Made::Stored(keep_or_discard(body, identity.len, input)?));
    } else {
        run_beside(jobs, threads).map_err(fail)?;
    }
    for spill in scratch {
        let len = spill.metadata().with_context(write_err)?.len();
        made.push(Made::Spilled(spill, len));
    }
    Ok(made)
}

/// Runs `jobs` on `threads` threads at most, each job once; the first error.
fn run_beside(jobs: Vec<Beside<'_>>, threads: usize) -> std::io::Result<()> {
    use std::sync::Mutex;
    let workers = threads.clamp(1, jobs.len().max(1));
    let jobs = Mutex::new(jobs.into_iter());
    let failed: Mutex<Option<std::io::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some(job) = job else { return };
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        .unwrap_or_else(|_| Err(std::io::Error::other("an encoder panicked")));
                    if let Err(e) = result {
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Stores a body `compress_streamed` made, when it passes the keep rule.
fn store_made(
    writer: &mut PackWriter,
    made: Made,
    identity_len: u64,
    input: &AssembleInput<'_>,
) -> anyhow::Result<Option<BodyRef>> {
    match made {
        Made::Stored(body) => Ok(body),
        Made::Spilled(_, len) if !worth_keeping(identity_len, len) => Ok(None),
        Made::Spilled(spill, len) => {
            let mut from = std::io::BufReader::with_capacity(
                1 << 20,
                RangeReader::new(Arc::new(spill), 0, len),
            );
            let body = writer
                .add_body_from(&mut from)
                .with_context(|| format!("{}: cannot write", input.out_name))?;
            Ok(Some(body))
        }
    }
}

/// Stores an encoded body that passes the keep rule, or cuts it off.
fn keep_or_discard(
    body: crate::pack::BodyWriter<'_>,
    identity_len: u64,
    input: &AssembleInput<'_>,
) -> anyhow::Result<Option<BodyRef>> {
    let write_err = || format!("{}: cannot write", input.out_name);
    if worth_keeping(identity_len, body.written()) {
        Ok(Some(body.finish().with_context(write_err)?))
    } else {
        body.discard().with_context(write_err)?;
        Ok(None)
    }
}

/// Counts the bytes a reader yields.
struct CountingReader<R> {
    inner: R,
    /// Bytes read so far.
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// What the header blocks of one file as served by one route share.
struct FileHeads<'a> {
    file: &'a SourceFile,
    content_type: &'a str,
    validators: bool,
    /// Fields from `_headers`.
    custom: &'a [(String, String)],
    cache: &'a CachePolicy,
    /// The route's `Use-As-Dictionary` value.
    use_as_dictionary: Option<&'a str>,
    /// The file has more than one plain variant.
    several: bool,
    /// The file has delta variants: every variant varies on the dictionary.
    has_deltas: bool,
}

impl FileHeads<'_> {
    /// The header blocks of `bodies`, in their order.
    fn heads<'b>(&self, bodies: impl Iterator<Item = (Encoding, &'b BodyRef)>) -> Vec<HeadBlock> {
        let cache_control = self.cache.for_file(&self.file.path, self.content_type);
        let kept: Vec<(String, String)>;
        let custom = if self.cache.revalidate_all {
            kept = self
                .custom
                .iter()
                .filter(|(name, _)| !name.eq_ignore_ascii_case("Cache-Control"))
                .cloned()
                .collect();
            &kept[..]
        } else {
            self.custom
        };
        bodies
            .map(|(encoding, body)| {
                let etag = etag_for(&body.hash);
                variant_head(&VariantHead {
                    etag: self.validators.then_some(etag.as_str()),
                    last_modified: self.validators.then_some(self.file.mtime),
                    cache_control: &cache_control,
                    vary: self.has_deltas || self.several,
                    vary_dictionary: self.has_deltas,
                    use_as_dictionary: self.use_as_dictionary,
                    custom,
                    content_type: self.content_type,
                    encoding,
                    content_length: body.len,
                })
            })
            .collect()
    }
}
