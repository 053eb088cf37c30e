//! `kiln store get s3://BUCKET/KEY`: one small object to standard output.
//! What `kiln serve` runs, before its sandbox, for a secret it is given
//! as a store URL (`--tls-ticket-keys`, `--quic-host-key`): the network
//! client runs in this short-lived child, never in the server.

use std::io::Write as _;

use anyhow::{anyhow, bail};
use object_store::path::Path as ObjectPath;

use super::{EndpointArgs, StoreUrl, client};

/// The longest the fetch may take, all retries included: the server
/// waits for it at start.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `kiln store get`.
#[derive(clap::Args)]
pub struct GetArgs {
    /// The object: s3://BUCKET/KEY.
    #[arg(value_name = "s3://BUCKET/KEY")]
    pub url: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Refuse an object larger than this, without reading it.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: u64,
    /// Keep the capabilities of the user it runs as (the server's
    /// `--no-sandbox`).
    #[arg(long)]
    pub no_sandbox: bool,
}

/// Runs `kiln store get`.
pub fn run(args: GetArgs) -> anyhow::Result<()> {
    let (folder, name) = StoreUrl::parse_object(&args.url).map_err(|e| anyhow!(e))?;
    if !args.no_sandbox {
        crate::confine::drop_privileges()?;
    }
    let client = client::connect(&folder, &args.endpoint)?;
    let location = ObjectPath::from(folder.key(&name));
    let fetch = async {
        let failed = |e: object_store::Error| match e {
            object_store::Error::NotFound { .. } => anyhow!("no such object ({})", client.place),
            e => anyhow!("{}: {}", client.place, client::one_line(&e)),
        };
        let got = client.store.get(&location).await.map_err(failed)?;
        if got.meta.size > args.max_bytes {
            bail!(
                "{} bytes, more than the {} it may hold",
                got.meta.size,
                args.max_bytes
            );
        }
        got.bytes().await.map_err(failed)
    };
    let bytes = client::runtime()?
        .block_on(async { tokio::time::timeout(FETCH_TIMEOUT, fetch).await })
        .map_err(|_| {
            anyhow!(
                "no answer within {} s ({})",
                FETCH_TIMEOUT.as_secs(),
                client.place
            )
        })??;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow!("cannot write the object to standard output: {e}"))
}
