//! Writes the planned routes into a pack: reads the files in source order,
//! in batches of bounded size (so that memory does not grow with the site),
//! compresses every distinct compressible content once (in parallel within a
//! batch), stores bodies in source order, prepares the header blocks and
//! adds variant sets, routes and rules. Output order never depends on thread
//! scheduling or on the batch size.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use super::compress::{CompressOptions, MIN_SAVED_BYTES, encode_if_worth};
use super::headers::{CachePolicy, VariantHead, etag_for, redirect_head, variant_head};
use super::mime::{content_type, is_compressible};
use super::netlify::{HeaderRule, headers_for};
use super::routes::{RoutePlan, Target};
use super::source::SourceFile;
use super::urlpath::html_escape;
use crate::pack::writer::BodyRef;
use crate::pack::{Encoding, PackStats, PackWriter, RouteIn, RuleIn, VariantIn, VariantSet};

/// Bodies written per encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodingTotals {
    /// Distinct bodies stored.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What `assemble` wrote.
#[derive(Debug, Default)]
pub struct Assembled {
    /// What the pack writer reports (size, routes, de-duplication).
    pub stats: PackStats,
    /// Indexed by `Encoding as usize`.
    pub per_encoding: [EncodingTotals; 4],
}

/// Everything `assemble` needs besides the files and the plan.
pub struct AssembleInput<'a> {
    /// Which encodings to produce, how hard.
    pub compress: &'a CompressOptions,
    /// `Cache-Control` values per kind of file.
    pub cache: &'a CachePolicy,
    /// The parsed `_headers` (empty when absent or disabled).
    pub header_rules: &'a [HeaderRule],
    /// Show a progress bar on stderr while compressing.
    pub progress: bool,
    /// Input bytes read at once (unless one file is larger).
    pub batch_bytes: u64,
}

/// The stored bodies of one file: identity first, then kept encodings.
type FileBodies = Vec<(Encoding, BodyRef)>;

/// The kept encoded variants of one content.
type Encoded = Vec<(Encoding, Vec<u8>)>;

/// One kept encoded variant of a content, as a compression task returns it.
type KeptVariant = ([u8; 32], Encoding, Vec<u8>);

/// A variant set is shared by the routes serving the same file with the
/// same validators flag and the same custom headers.
type SetKey = (usize, bool, Vec<(String, String)>);

/// Writes the pack at `out`; nothing exists at `out` unless this succeeds.
pub fn assemble(
    files: &[SourceFile],
    plan: &RoutePlan,
    input: &AssembleInput<'_>,
    out: &Path,
) -> anyhow::Result<Assembled> {
    let types: Vec<String> = files.iter().map(|f| content_type(&f.path)).collect();
    // Created first so that an unwritable output fails before the long
    // compression step.
    let mut writer =
        PackWriter::create(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let write_err = || format!("{}: cannot write", out.display());
    let mut result = Assembled::default();
    let mut add_body =
        |w: &mut PackWriter, enc: Encoding, bytes: &[u8]| -> anyhow::Result<BodyRef> {
            let body = w.add_body(bytes).with_context(write_err)?;
            if body.fresh {
                let t = &mut result.per_encoding[enc as usize];
                t.count += 1;
                t.bytes += body.len;
            }
            Ok(body)
        };

    let bar = progress_bar(input, files, &types);
    let mut bodies: Vec<FileBodies> = Vec::with_capacity(files.len());
    // Encoded bodies of each compressible content already written, by hash:
    // a later copy of the content reuses them without compressing again.
    let mut encoded_bodies: HashMap<[u8; 32], FileBodies> = HashMap::new();
    // Encoded bytes those reuses did not write (the writer never sees them).
    let mut reused_bytes = 0;
    let mut start = 0;
    while start < files.len() {
        let mut end = start + 1;
        let mut size = files[start].len;
        while end < files.len() && size + files[end].len <= input.batch_bytes {
            size += files[end].len;
            end += 1;
        }
        let contents: Vec<Cow<'_, [u8]>> = files[start..end]
            .iter()
            .map(SourceFile::read)
            .collect::<anyhow::Result<_>>()?;
        let hashes: Vec<[u8; 32]> = contents
            .par_iter()
            .map(|c| *blake3::hash(c).as_bytes())
            .collect();
        let compressible: Vec<bool> = types[start..end]
            .iter()
            .map(|t| is_compressible(t))
            .collect();
        let mut encoded = compress_distinct(
            &files[start..end],
            &contents,
            &hashes,
            &compressible,
            &encoded_bodies,
            input.compress,
            &bar,
        )?;
        for (k, content) in contents.iter().enumerate() {
            let mut set = vec![(
                Encoding::Identity,
                add_body(&mut writer, Encoding::Identity, content)?,
            )];
            if compressible[k] {
                match encoded_bodies.get(&hashes[k]) {
                    Some(done) => {
                        reused_bytes += done.iter().map(|(_, b)| b.len).sum::<u64>();
                        set.extend_from_slice(done);
                    }
                    None => {
                        let mut done = Vec::new();
                        for (enc, bytes) in encoded.remove(&hashes[k]).unwrap_or_default() {
                            done.push((enc, add_body(&mut writer, enc, &bytes)?));
                        }
                        set.extend_from_slice(&done);
                        encoded_bodies.insert(hashes[k], done);
                    }
                }
            }
            bodies.push(set);
        }
        start = end;
    }
    bar.finish_and_clear();
    let mut sets: HashMap<SetKey, VariantSet> = HashMap::new();
    for route in &plan.routes {
        let validators = route.validators();
        let (set, last_modified) = match &route.target {
            Target::File(i) => {
                let custom = headers_for(input.header_rules, &plan.headers_paths(route));
                let cache_key = (*i, validators, custom);
                let set = match sets.get(&cache_key) {
                    Some(set) => *set,
                    None => {
                        let set = file_variant_set(
                            &mut writer,
                            &files[*i],
                            &types[*i],
                            &bodies[*i],
                            validators,
                            &cache_key.2,
                            input.cache,
                        )
                        .with_context(write_err)?;
                        sets.insert(cache_key, set);
                        set
                    }
                };
                (set, files[*i].mtime)
            }
            Target::Redirect(location) => {
                let escaped = html_escape(location);
                let page = format!(
                    "<!doctype html><title>Moved</title><a href=\"{escaped}\">{escaped}</a>\n"
                );
                let body = add_body(&mut writer, Encoding::Identity, page.as_bytes())?;
                let head = redirect_head(location, &input.cache.for_redirect(), body.len);
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
    for rule in &plan.rules {
        writer.add_rule(RuleIn {
            from: &rule.from,
            to: rule.to.as_bytes(),
            status: rule.status,
            force: rule.force,
        });
    }
    result.stats = writer.finish().with_context(write_err)?;
    result.stats.dedup_saved += reused_bytes;
    Ok(result)
}

/// The progress bar of the compression: one unit per byte per encoding of
/// each compressible file large enough to be tried.
fn progress_bar(input: &AssembleInput<'_>, files: &[SourceFile], types: &[String]) -> ProgressBar {
    if !input.progress {
        return ProgressBar::hidden();
    }
    let total: u64 = files
        .iter()
        .zip(types)
        .filter(|(f, t)| is_compressible(t) && f.len >= MIN_SAVED_BYTES as u64)
        .map(|(f, _)| f.len * input.compress.encodings.len() as u64)
        .sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "compressing {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("valid template"),
    );
    bar
}

/// Compresses each distinct content of a batch's compressible files once
/// per encoding, except contents already done in earlier batches; keyed by
/// BLAKE3 of the content, variants in `Encoding` order. Each (content,
/// encoding) pair is a separate task, largest first, so that the cores stay
/// busy until the end of the batch.
fn compress_distinct(
    files: &[SourceFile],
    contents: &[Cow<'_, [u8]>],
    hashes: &[[u8; 32]],
    compressible: &[bool],
    done: &HashMap<[u8; 32], FileBodies>,
    opts: &CompressOptions,
    bar: &ProgressBar,
) -> anyhow::Result<HashMap<[u8; 32], Encoded>> {
    let mut encodings = opts.encodings.clone();
    encodings.retain(|e| *e != Encoding::Identity);
    encodings.sort();
    encodings.dedup();
    let mut seen = HashMap::new();
    let mut tasks: Vec<(usize, Encoding)> = Vec::new();
    for (k, content) in contents.iter().enumerate() {
        if !compressible[k] || content.len() < MIN_SAVED_BYTES {
            continue;
        }
        if done.contains_key(&hashes[k]) || seen.insert(hashes[k], ()).is_some() {
            bar.inc(content.len() as u64 * encodings.len() as u64);
            continue;
        }
        tasks.extend(encodings.iter().map(|e| (k, *e)));
    }
    tasks.sort_by_key(|(k, _)| std::cmp::Reverse(contents[*k].len()));
    let results: Vec<anyhow::Result<Option<KeptVariant>>> = tasks
        .par_iter()
        .map(|&(k, encoding)| {
            let kept = encode_if_worth(&contents[k], encoding, opts).with_context(|| {
                format!("{}: {} compression failed", files[k].path, encoding.token())
            })?;
            bar.inc(contents[k].len() as u64);
            Ok(kept.map(|bytes| (hashes[k], encoding, bytes)))
        })
        .collect();
    let mut by_hash: HashMap<[u8; 32], Encoded> = HashMap::new();
    for result in results {
        if let Some((hash, encoding, bytes)) = result? {
            by_hash.entry(hash).or_default().push((encoding, bytes));
        }
    }
    for variants in by_hash.values_mut() {
        variants.sort_by_key(|(e, _)| *e);
    }
    Ok(by_hash)
}

/// Builds and stores the variant set of one file as served by one route.
fn file_variant_set(
    writer: &mut PackWriter,
    file: &SourceFile,
    content_type: &str,
    bodies: &FileBodies,
    validators: bool,
    custom: &[(String, String)],
    cache: &CachePolicy,
) -> std::io::Result<VariantSet> {
    let cache_control = cache.for_file(&file.path, content_type);
    let heads: Vec<_> = bodies
        .iter()
        .map(|(encoding, body)| {
            let etag = etag_for(&body.hash);
            variant_head(&VariantHead {
                etag: validators.then_some(etag.as_str()),
                last_modified: validators.then_some(file.mtime),
                cache_control: &cache_control,
                vary: bodies.len() > 1,
                custom,
                content_type,
                encoding: *encoding,
                content_length: body.len,
            })
        })
        .collect();
    let variants: Vec<VariantIn<'_>> = bodies
        .iter()
        .zip(&heads)
        .map(|((encoding, body), head)| VariantIn {
            encoding: *encoding,
            head,
            body: *body,
        })
        .collect();
    writer.add_variant_set(&variants)
}
