//! Writes the planned routes into a pack: compresses every distinct
//! compressible content once (in parallel), stores bodies in source order,
//! prepares the header blocks and adds variant sets, routes and rules.
//! Output order never depends on thread scheduling.

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
    let encoded = compress_distinct(files, &types, input)?;
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

    let mut bodies: Vec<FileBodies> = Vec::with_capacity(files.len());
    for (f, t) in files.iter().zip(&types) {
        let mut set = vec![(
            Encoding::Identity,
            add_body(&mut writer, Encoding::Identity, &f.bytes)?,
        )];
        let variants = is_compressible(t)
            .then(|| encoded.get(blake3::hash(&f.bytes).as_bytes()))
            .flatten();
        if let Some(variants) = variants {
            for (enc, bytes) in variants {
                set.push((*enc, add_body(&mut writer, *enc, bytes)?));
            }
        }
        bodies.push(set);
    }
    let mut sets: HashMap<SetKey, VariantSet> = HashMap::new();
    for route in &plan.routes {
        let validators = route.validators();
        let (set, last_modified) = match &route.target {
            Target::File(i) => {
                let custom = headers_for(input.header_rules, &route.headers_path());
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
    Ok(result)
}

/// Compresses each distinct content of a compressible file once per
/// encoding; keyed by BLAKE3 of the content, variants in `Encoding` order.
/// Each (content, encoding) pair is a separate task, largest first, so that
/// the cores stay busy until the end.
fn compress_distinct(
    files: &[SourceFile],
    types: &[String],
    input: &AssembleInput<'_>,
) -> anyhow::Result<HashMap<[u8; 32], Encoded>> {
    let mut encodings = input.compress.encodings.clone();
    encodings.retain(|e| *e != Encoding::Identity);
    encodings.sort();
    encodings.dedup();
    let mut seen = HashMap::new();
    let mut tasks: Vec<(&SourceFile, [u8; 32], Encoding)> = Vec::new();
    for (f, t) in files.iter().zip(types) {
        if !is_compressible(t) || f.bytes.len() < MIN_SAVED_BYTES {
            continue;
        }
        let hash = *blake3::hash(&f.bytes).as_bytes();
        if seen.insert(hash, ()).is_none() {
            tasks.extend(encodings.iter().map(|e| (f, hash, *e)));
        }
    }
    tasks.sort_by_key(|(f, _, _)| std::cmp::Reverse(f.bytes.len()));
    let bar = if input.progress {
        let total: u64 = tasks.iter().map(|(f, _, _)| f.bytes.len() as u64).sum();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "compressing {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .expect("valid template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let results: Vec<anyhow::Result<Option<KeptVariant>>> = tasks
        .par_iter()
        .map(|(f, hash, encoding)| {
            let kept = encode_if_worth(&f.bytes, *encoding, input.compress)
                .with_context(|| format!("{}: {} compression failed", f.path, encoding.token()))?;
            bar.inc(f.bytes.len() as u64);
            Ok(kept.map(|bytes| (*hash, *encoding, bytes)))
        })
        .collect();
    bar.finish_and_clear();
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
