//! `s3://BUCKET/PREFIX/`, checked.

use std::fmt;

/// A bucket and a key prefix: empty, or ending in `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreUrl {
    pub bucket: String,
    pub prefix: String,
}

impl StoreUrl {
    /// Whether `text` is meant as a store URL (and not a local path).
    pub fn is_store(text: &str) -> bool {
        text.starts_with("s3://")
    }

    /// Parses `s3://BUCKET/PREFIX/` (the prefix may be empty; a missing
    /// final `/` is added: the prefix names a folder).
    pub fn parse_folder(text: &str) -> Result<StoreUrl, String> {
        let (bucket, key) = split(text)?;
        let prefix = match key {
            "" => String::new(),
            key if key.ends_with('/') => key.to_string(),
            key => format!("{key}/"),
        };
        Ok(StoreUrl { bucket, prefix })
    }

    /// Parses `s3://BUCKET/PREFIX/HOST.pack`: the folder and the object's
    /// file name.
    pub fn parse_object(text: &str) -> Result<(StoreUrl, String), String> {
        let (bucket, key) = split(text)?;
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (format!("{prefix}/"), name),
            None => (String::new(), key),
        };
        if name.is_empty() {
            return Err(format!(
                "{text}: names a folder, not an object (…/HOST.pack)"
            ));
        }
        Ok((StoreUrl { bucket, prefix }, name.to_string()))
    }

    /// The key of `name` in the folder.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

fn split(text: &str) -> Result<(String, &str), String> {
    let rest = text
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{text}: not an s3://BUCKET/PREFIX/ URL"))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'-'));
    if !valid {
        return Err(format!(
            "{text}: {bucket:?} is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)"
        ));
    }
    if key.starts_with('/') || key.contains("//") {
        return Err(format!("{text}: empty path segment in the prefix"));
    }
    Ok((bucket.to_string(), key))
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
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
}
