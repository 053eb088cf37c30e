//! `s3://BUCKET/PREFIX/`, `gs://BUCKET/PREFIX/` and
//! `az://CONTAINER/PREFIX/`, checked.

use std::fmt;

/// Which kind of store a URL names: the API its client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Amazon S3 and what speaks its API (MinIO, Ceph RGW, Garage, R2).
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage: a container of the account the environment
    /// names.
    Azure,
}

impl Scheme {
    const ALL: [Scheme; 3] = [Scheme::S3, Scheme::Gcs, Scheme::Azure];

    /// The URL's scheme, with its `://`.
    pub fn prefix(self) -> &'static str {
        match self {
            Scheme::S3 => "s3://",
            Scheme::Gcs => "gs://",
            Scheme::Azure => "az://",
        }
    }

    /// What the first segment is called, for messages.
    fn bucket_word(self) -> &'static str {
        match self {
            Scheme::S3 | Scheme::Gcs => "bucket",
            Scheme::Azure => "container",
        }
    }

    /// Whether `name` is a valid bucket (container) name: 3 to 63 lower
    /// case letters, digits and hyphens everywhere; dots too on S3 and
    /// GCS, and underscores on GCS.
    fn valid_bucket(self, name: &str) -> bool {
        (3..=63).contains(&name.len())
            && name.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || c == b'-'
                    || (c == b'.' && self != Scheme::Azure)
                    || (c == b'_' && self == Scheme::Gcs)
            })
    }
}

/// A bucket and a key prefix: empty, or ending in `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreUrl {
    pub scheme: Scheme,
    pub bucket: String,
    pub prefix: String,
}

impl StoreUrl {
    /// Whether `text` is meant as a store URL (and not a local path).
    pub fn is_store(text: &str) -> bool {
        Scheme::ALL.iter().any(|s| text.starts_with(s.prefix()))
    }

    /// Parses `s3://BUCKET/PREFIX/` (or `gs://`, `az://`; the prefix may be
    /// empty; a missing final `/` is added: the prefix names a folder).
    pub fn parse_folder(text: &str) -> Result<StoreUrl, String> {
        let (scheme, bucket, key) = split(text)?;
        let prefix = match key {
            "" => String::new(),
            key if key.ends_with('/') => key.to_string(),
            key => format!("{key}/"),
        };
        Ok(StoreUrl {
            scheme,
            bucket,
            prefix,
        })
    }

    /// Parses `s3://BUCKET/PREFIX/HOST.pack`: the folder and the object's
    /// file name.
    pub fn parse_object(text: &str) -> Result<(StoreUrl, String), String> {
        let (scheme, bucket, key) = split(text)?;
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (format!("{prefix}/"), name),
            None => (String::new(), key),
        };
        if name.is_empty() {
            return Err(format!(
                "{text}: names a folder, not an object (…/HOST.pack)"
            ));
        }
        Ok((
            StoreUrl {
                scheme,
                bucket,
                prefix,
            },
            name.to_string(),
        ))
    }

    /// The key of `name` in the folder.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

fn split(text: &str) -> Result<(Scheme, String, &str), String> {
    let (scheme, rest) = Scheme::ALL
        .iter()
        .find_map(|&s| Some((s, text.strip_prefix(s.prefix())?)))
        .ok_or_else(|| {
            format!("{text}: not an s3://BUCKET/PREFIX/ (or gs://, az://CONTAINER/) URL")
        })?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if !scheme.valid_bucket(bucket) {
        let word = scheme.bucket_word();
        let allowed = match scheme {
            Scheme::S3 => "lower-case letters, digits, dots and hyphens",
            Scheme::Gcs => "lower-case letters, digits, dots, hyphens and underscores",
            Scheme::Azure => "lower-case letters, digits and hyphens",
        };
        return Err(format!(
            "{text}: {bucket:?} is not a {word} name (3 to 63 {allowed})"
        ));
    }
    if key.starts_with('/') || key.contains("//") {
        return Err(format!("{text}: empty path segment in the prefix"));
    }
    Ok((scheme, bucket.to_string(), key))
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}/{}", self.scheme.prefix(), self.bucket, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_and_objects_parse() {
        let url = StoreUrl::parse_folder("s3://sites/prod").unwrap();
        assert_eq!(
            (url.bucket.as_str(), url.prefix.as_str()),
            ("sites", "prod/")
        );
        assert_eq!(url.to_string(), "s3://sites/prod/");
        let url = StoreUrl::parse_folder("s3://sites").unwrap();
        assert_eq!(url.prefix, "");
        assert_eq!(url.key("a.pack"), "a.pack");
        let (url, name) = StoreUrl::parse_object("s3://sites/a/b/example.com.pack").unwrap();
        assert_eq!(
            (url.prefix.as_str(), name.as_str()),
            ("a/b/", "example.com.pack")
        );
        assert!(StoreUrl::parse_object("s3://sites/a/").is_err());
        assert!(StoreUrl::parse_folder("s3://Bad_Bucket/").is_err());
        assert!(StoreUrl::parse_folder("s3://ab/").is_err());
        assert!(StoreUrl::parse_folder("s3://sites//x/").is_err());
        assert!(StoreUrl::parse_folder("/var/sites").is_err());
        assert!(StoreUrl::is_store("s3://x") && !StoreUrl::is_store("./s3:"));
    }

    #[test]
    fn every_scheme_parses_with_its_own_names() {
        let url = StoreUrl::parse_folder("gs://my_sites/prod").unwrap();
        assert_eq!((url.scheme, url.prefix.as_str()), (Scheme::Gcs, "prod/"));
        assert_eq!(url.to_string(), "gs://my_sites/prod/");
        let (url, name) = StoreUrl::parse_object("az://sites/a/example.com.pack").unwrap();
        assert_eq!(
            (url.scheme, url.bucket.as_str(), name.as_str()),
            (Scheme::Azure, "sites", "example.com.pack")
        );
        assert_eq!(url.to_string(), "az://sites/a/");
        assert!(StoreUrl::is_store("gs://x") && StoreUrl::is_store("az://x"));
        // Underscores are GCS's only, dots not Azure's.
        assert!(StoreUrl::parse_folder("s3://my_sites/").is_err());
        let error = StoreUrl::parse_folder("az://my.sites/").unwrap_err();
        assert!(error.contains("not a container name"), "{error}");
        assert!(StoreUrl::parse_folder("ftp://sites/").is_err());
    }
}
