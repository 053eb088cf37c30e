//! What is served, as opened at start: what SITE is taken for (a pack, a
//! folder of sites, a directory or archive to preview), a preview's first
//! build, made once the sandbox is up as the user it is served as, and
//! what the sandbox lets be read again after start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::bail;

use super::handler::{Site, Sites};
use super::metrics::Metrics;
use super::net::Backend;
use super::stack::CurrentSites;
use super::{ServeArgs, control, load, sandbox, tls, watch};

/// What is served, as opened at start.
pub(super) struct Opened {
    /// The first generation of the sites (a stand-in until a preview's
    /// first build).
    pub(super) sites: Arc<Sites>,
    /// What reloads it.
    pub(super) served: control::Served,
    /// A preview's first build, made inside the sandbox.
    pub(super) first_build: Option<FirstBuild>,
    /// What SITE named, for the sandbox and the watch.
    pub(super) path: Option<PathBuf>,
    /// For the start-up line (a preview's, once built).
    pub(super) what: String,
}

/// A preview not built yet: its first build is made once the sandbox is
/// up, as the user it is served as, as its rebuilds and reloads are, so
/// that it publishes nothing that user could not read. Checking each file
/// as that user instead (mode bits, owner, groups, every folder above it)
/// would miss POSIX ACLs, capabilities and LSMs that the kernel applies to
/// an open; the kernel's own check, by opening as that user, misses none.
pub(super) enum FirstBuild {
    /// `--watch`: the directory watched, and its settings.
    Watch(Box<watch::Watching>),
    /// A directory or archive fired once, reloaded by `Served::One`.
    Once,
}

/// Opens what SITE names: the dummy answer, a live preview, a folder of
/// sites, or one pack (or a directory or archive fired into one, once the
/// sandbox is up: `first_build`).
pub(super) fn open_served(
    args: &ServeArgs,
    metrics: &Arc<Metrics>,
    store_cache: Option<&Path>,
) -> anyhow::Result<Opened> {
    let stand_in = || Sites::single(Site::dummy(metrics.site(load::DEFAULT_SITE)));
    if args.dummy {
        return Ok(Opened {
            sites: stand_in(),
            served: control::Served::Nothing,
            first_build: None,
            path: None,
            what: "dummy answers".to_string(),
        });
    }
    let opts = load::LoadOptions {
        preload: args.preload || args.mlock,
        mlock: args.mlock,
        preview_cache_control: args.preview_cache_control,
    };
    // A store's cache folder is a folder of sites even while it is empty.
    if let Some(cache) = store_cache {
        let folder = load::Folder::open(cache, opts, Arc::clone(metrics))?;
        let what = format!(
            "{} sites from {} (cached in {})",
            folder.site_count(),
            args.site.as_deref().unwrap_or(cache).display(),
            cache.display()
        );
        return Ok(Opened {
            sites: folder.sites(),
            served: control::Served::Folder(folder),
            first_build: None,
            path: Some(cache.to_path_buf()),
            what,
        });
    }
    let path = match &args.site {
        Some(path) => path.clone(),
        None => {
            tracing::info!("no SITE given: serving the current folder");
            PathBuf::from(".")
        }
    };
    let taken = load::take(&path, args.preview)?;
    if let load::Taken::Folder { packs } = taken {
        if args.watch || args.index_pages {
            let flag = if args.watch {
                "--watch"
            } else {
                "--index-pages"
            };
            bail!(
                "{}: a folder of sites ({packs} packs), whose packs are reloaded when replaced: \
                 {flag} applies to a preview; add --preview to fire the folder into a site",
                path.display()
            );
        }
        tracing::info!(
            "serving {} as a folder of sites ({packs} packs)",
            path.display()
        );
        let folder = load::Folder::open(&path, opts, Arc::clone(metrics))?;
        let what = format!("{} sites from {}", folder.site_count(), path.display());
        return Ok(Opened {
            sites: folder.sites(),
            served: control::Served::Folder(folder),
            first_build: None,
            path: Some(path),
            what,
        });
    }
    if args.watch {
        let level = args
            .compression
            .unwrap_or(crate::build::compress::Level::Fast);
        let watching = watch::start(&path, level, args.index_pages, args.preview_cache_control)?;
        tracing::info!(
            "previewing {} as a site, rebuilt when a file changes",
            path.display()
        );
        return Ok(Opened {
            sites: stand_in(),
            served: control::Served::Nothing,
            first_build: Some(FirstBuild::Watch(Box::new(watching))),
            what: String::new(),
            path: Some(path),
        });
    }
    let stats = metrics.site(load::DEFAULT_SITE);
    let source = load::SiteSource {
        path: path.clone(),
        opts,
        index_pages: args.index_pages,
    };
    match taken {
        load::Taken::Preview(crate::build::source::Kind::Archive) => {
            tracing::info!("previewing {} as a site (a tar archive)", path.display());
        }
        load::Taken::Preview(_)
            if std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()) =>
        {
            tracing::warn!(
                "{} is empty: serving it as an empty site (a folder of sites needs a HOST.pack in it at start)",
                path.display()
            );
        }
        load::Taken::Preview(_) if args.preview => {
            tracing::info!("previewing {} as a site (--preview)", path.display());
        }
        load::Taken::Preview(_) => tracing::info!(
            "previewing {} as a site (a folder of sites holds a HOST.pack)",
            path.display()
        ),
        load::Taken::Pack => {
            let pack = load::open_site(&source)?;
            let what = format!("{} ({} routes)", path.display(), pack.route_count());
            stats.loads.fetch_add(1, Ordering::Relaxed);
            return Ok(Opened {
                sites: Sites::single(Site::new(pack, 0, Arc::clone(&stats))),
                what,
                path: Some(path),
                served: control::Served::One { source, stats },
                first_build: None,
            });
        }
        load::Taken::Folder { .. } => unreachable!("served above"),
    }
    Ok(Opened {
        sites: stand_in(),
        what: String::new(),
        path: Some(path),
        served: control::Served::One { source, stats },
        first_build: Some(FirstBuild::Once),
    })
}

/// Fires a preview's first build, inside the sandbox, and publishes it;
/// returns the watcher of a live preview, to be started, and what the
/// start-up line names. `switched`: the user kiln started as (root) is
/// not the one building, who may lack read rights the starting user had:
/// an error for want of them says so.
pub(super) fn build_first_preview(
    first: FirstBuild,
    served: &control::Served,
    path: &Path,
    current: &CurrentSites,
    metrics: &Metrics,
    switched: Option<&sandbox::Identity>,
) -> anyhow::Result<(Option<watch::Preview>, String)> {
    let built = match (first, served) {
        (FirstBuild::Watch(watching), _) => watching
            .first_build(metrics.site(load::DEFAULT_SITE))
            .map(|(site, preview)| (site, Some(preview))),
        (FirstBuild::Once, control::Served::One { source, stats }) => {
            load::open_site(source).map(|pack| {
                stats.loads.fetch_add(1, Ordering::Relaxed);
                (Site::new(pack, 0, Arc::clone(stats)), None)
            })
        }
        (FirstBuild::Once, _) => unreachable!("a preview built once is reloaded as one site"),
    };
    let (site, preview) = built.map_err(|e| match switched {
        Some(user) if is_permission_denied(&e) => anyhow::anyhow!(
            "{e:#}; the preview is built as user {0}, who serves it: let {0} read {1}, \
             or serve as root (--user root)",
            user.name,
            path.display()
        ),
        _ => e,
    })?;
    let routes = site.pack().map_or(0, |p| p.route_count());
    current.publish(Sites::single(site));
    Ok((preview, format!("{} ({routes} routes)", path.display())))
}

/// Whether `e` comes from a refused open or listing (EACCES).
fn is_permission_denied(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    })
}

/// What the sandbox lets the server read after start: what is served
/// (a pack, a directory or archive to preview, a folder of sites) and the
/// certificates again at reloads (previews are built in memory).
pub(super) fn sandbox_plan(
    identity: sandbox::Identity,
    backend: Backend,
    site: Option<&Path>,
    preview: bool,
    tls: Option<&tls::Source>,
) -> sandbox::Plan {
    use sandbox::Held;
    let mut plan = sandbox::Plan::new(identity, backend);
    if let Some(site) = site {
        if site.is_dir() && preview {
            plan.read_tree_again(site, Held::Preview);
        } else if site.is_dir() {
            plan.read_tree_again(site, Held::FolderOfSites);
            // A pack of a folder of sites may be a link to a file
            // elsewhere: that folder is read again too.
            let entries = std::fs::read_dir(site).into_iter().flatten().flatten();
            for entry in entries.filter(|e| e.file_type().is_ok_and(|t| t.is_symlink())) {
                plan.read_file_again(&entry.path(), Held::File);
            }
        } else {
            plan.read_file_again(site, Held::File);
        }
    }
    if let Some(tls::Source::Files(pairs)) = tls {
        for pair in pairs {
            plan.read_file_again(&pair.cert, Held::File);
            plan.read_file_again(&pair.key, Held::PrivateKey);
        }
    }
    plan
}
