//! `kiln publish PACK s3://BUCKET/PREFIX/HOST.pack`: checks the pack, then
//! uploads it in one PUT (up to a part's size) or as one multipart upload.
//! The object appears only when the upload completes, whole and at once: a node listing or reading the key
//! meanwhile sees the previous pack (or none), never part of the new one;
//! an upload that fails is aborted and leaves the previous one in place.

use std::io::Read as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};
use object_store::WriteMultipart;
use object_store::path::Path as ObjectPath;

use super::{EndpointArgs, StoreUrl, client};
use crate::serve::load::site_name;

/// The size of each part (S3 wants 5 MiB at least, the last part aside).
const PART_SIZE: usize = 8 << 20;
/// Parts in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

/// `kiln publish`.
#[derive(clap::Args)]
pub struct PublishArgs {
    /// The pack to upload; its checksums are verified first.
    pub pack: PathBuf,
    /// Where: `s3://BUCKET/PREFIX/HOST.pack` (or `gs://…`,
    /// `az://CONTAINER/…`; `_default.pack` for the hosts no other pack
    /// serves).
    pub destination: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// Runs `kiln publish`, printing one line when the object is in place.
pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    crate::report::init_logging();
    let line = publish(&args.pack, &args.destination, &args.endpoint)?;
    crate::report::to_stdout(&line)
}

/// Verifies `pack` and uploads it to `destination`; the line to print.
pub fn publish(
    pack: &std::path::Path,
    destination: &str,
    endpoint: &EndpointArgs,
) -> anyhow::Result<String> {
    let (url, name) = StoreUrl::parse_object(destination).map_err(|e| anyhow!(e))?;
    if site_name(name.as_ref(), "pack").is_none() {
        bail!("{destination}: the object must be named HOST.pack (or _default.pack) to be served");
    }
    let opened = crate::pack::Pack::open(pack).map_err(|e| anyhow!("{}: {e}", pack.display()))?;
    crate::pack::verify::verify(&opened).map_err(|e| anyhow!("{}: {e}", pack.display()))?;
    drop(opened);
    let client = client::connect(&url, endpoint)?;
    let key = url.key(&name);
    let started = Instant::now();
    let (bytes, etag) = client::runtime()?
        .block_on(upload(&client, &key, pack))
        .with_context(|| format!("cannot publish to {destination}"))?;
    Ok(format!(
        "published {} ({bytes} bytes) to {destination} in {} ms (ETag {etag})\n",
        pack.display(),
        started.elapsed().as_millis()
    ))
}

/// Uploads `path` to `key` (in parts beyond `PART_SIZE`); returns its
/// size and ETag.
async fn upload(
    client: &client::Client,
    key: &str,
    path: &std::path::Path,
) -> anyhow::Result<(u64, String)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let location = ObjectPath::from(key);
    let size = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size <= PART_SIZE as u64 {
        // One part's worth goes up in one PUT, as atomic as a completed
        // multipart upload and two requests shorter (and what GCS
        // emulators, which lack the XML multipart API, take).
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let done = client
            .store
            .put(&location, bytes.into())
            .await
            .map_err(|e| anyhow!("{}: {}", client.place, client::one_line(&e)))?;
        return Ok((size, done.e_tag.unwrap_or_default()));
    }
    let upload = client
        .store
        .put_multipart(&location)
        .await
        .map_err(|e| anyhow!("{}: {}", client.place, client::one_line(&e)))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut buf = vec![0u8; PART_SIZE];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = writer.abort().await;
                return Err(anyhow!("cannot read {}: {e}", path.display()));
            }
        };
        if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
            let _ = writer.abort().await;
            return Err(anyhow!("{}: {}", client.place, client::one_line(&e)));
        }
        writer.write(&buf[..n]);
        total += n as u64;
    }
    let done = writer
        .finish()
        .await
        .map_err(|e| anyhow!("{}: {}", client.place, client::one_line(&e)))?;
    Ok((total, done.e_tag.unwrap_or_default()))
}
