//! The AWS shared configuration files, as the AWS CLI reads them:
//! `~/.aws/credentials` (or `AWS_SHARED_CREDENTIALS_FILE`) with sections
//! `[NAME]`, and `~/.aws/config` (or `AWS_CONFIG_FILE`) with `[default]`
//! and `[profile NAME]`; the profile is `AWS_PROFILE`, else `default`.
//! Read are the static keys (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`), `region` and `endpoint_url`; a setting in the
//! credentials file wins over the same in the config file, as the CLI's
//! precedence has it. Indented lines (a service's nested settings) and
//! what else a profile may say (roles, SSO, processes) are not read.
//!
//! Read once at start, before a sandbox: the worker of `kiln store sync`
//! cannot read them afterwards.

use std::path::{Path, PathBuf};

use anyhow::bail;

/// What the profile says; `None` for what it does not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Profile {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    /// The file the endpoint came from, for messages.
    pub endpoint_from: Option<PathBuf>,
}

/// The settings of the first section of `text` (INI) named one of
/// `wanted`; `None` when there is none.
fn section<'t>(text: &'t str, wanted: &[String]) -> Option<Vec<(&'t str, &'t str)>> {
    let mut found = false;
    let mut inside = false;
    let mut settings = Vec::new();
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = wanted.contains(&name);
            found |= inside;
        } else if inside && let Some((key, value)) = line.split_once('=') {
            settings.push((key.trim(), value.trim()));
        }
    }
    found.then_some(settings)
}

/// The text of `path`; empty when there is no such file.
fn read(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => bail!("{}: cannot read: {e}", path.display()),
    }
}

/// The profile the environment (`var`) names, from the files it names
/// or those under `$HOME/.aws`. `Ok(None)` when the default profile is
/// in neither file (or there is no home); a profile named by AWS_PROFILE
/// and found in neither is an error naming both files.
pub fn load(var: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Option<Profile>> {
    let home = var("HOME").map(|h| PathBuf::from(h).join(".aws"));
    let file = |variable: &str, name: &str| {
        var(variable)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(name)))
    };
    let credentials = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config = file("AWS_CONFIG_FILE", "config");
    let named = var("AWS_PROFILE");
    let name = named.as_deref().unwrap_or("default");
    let in_credentials = match &credentials {
        Some(path) => section(&read(path)?, &[name.to_string()])
            .map(|s| (path.clone(), s.into_iter().map(owned).collect::<Vec<_>>())),
        None => None,
    };
    let config_names = match name {
        "default" => vec!["default".to_string(), "profile default".to_string()],
        name => vec![format!("profile {name}")],
    };
    let in_config = match &config {
        Some(path) => section(&read(path)?, &config_names)
            .map(|s| (path.clone(), s.into_iter().map(owned).collect::<Vec<_>>())),
        None => None,
    };
    if in_credentials.is_none() && in_config.is_none() {
        if named.is_none() {
            return Ok(None);
        }
        let shown = |path: &Option<PathBuf>| {
            path.as_ref()
                .map_or("(no home)".to_string(), |p| p.display().to_string())
        };
        bail!(
            "AWS_PROFILE={name}: no [{name}] in {} and no [profile {name}] in {}",
            shown(&credentials),
            shown(&config)
        );
    }
    let mut profile = Profile::default();
    // The config file first, then the credentials file over it.
    for (path, settings) in in_config.into_iter().chain(in_credentials) {
        for (key, value) in settings {
            let value = Some(value);
            match key.as_str() {
                "aws_access_key_id" => profile.access_key_id = value,
                "aws_secret_access_key" => profile.secret_access_key = value,
                "aws_session_token" => profile.session_token = value,
                "region" => profile.region = value,
                "endpoint_url" => {
                    profile.endpoint_url = value;
                    profile.endpoint_from = Some(path.clone());
                }
                _ => {}
            }
        }
    }
    if profile.access_key_id.is_some() != profile.secret_access_key.is_some() {
        bail!(
            "profile {name} in {}: aws_access_key_id and aws_secret_access_key go together",
            credentials
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
    }
    Ok(Some(profile))
}

fn owned((key, value): (&str, &str)) -> (String, String) {
    (key.to_string(), value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(vars: &[(&str, String)]) -> anyhow::Result<Option<Profile>> {
        load(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_credentials_file_wins_over_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let aws = dir.path().join(".aws");
        std::fs::create_dir(&aws).unwrap();
        std::fs::write(
            aws.join("credentials"),
            "# keys\n[default]\naws_access_key_id = AKID\naws_secret_access_key=SECRET\n\
             [ci]\naws_access_key_id = CI\naws_secret_access_key = CISECRET\n",
        )
        .unwrap();
        std::fs::write(
            aws.join("config"),
            "[default]\nregion = eu-west-1\naws_access_key_id = IGNORED\n\
             s3 =\n  endpoint_url = http://nested.invalid\n\
             [profile ci]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let home = ("HOME", dir.path().to_str().unwrap().to_string());
        let default = load_with(std::slice::from_ref(&home)).unwrap().unwrap();
        assert_eq!(default.access_key_id.as_deref(), Some("AKID"));
        assert_eq!(default.secret_access_key.as_deref(), Some("SECRET"));
        assert_eq!(default.region.as_deref(), Some("eu-west-1"));
        assert_eq!(default.endpoint_url, None);
        let ci = load_with(&[home.clone(), ("AWS_PROFILE", "ci".into())])
            .unwrap()
            .unwrap();
        assert_eq!(ci.access_key_id.as_deref(), Some("CI"));
        assert_eq!(ci.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(ci.endpoint_from, Some(aws.join("config")));
        let missing = load_with(&[home.clone(), ("AWS_PROFILE", "nope".into())]).unwrap_err();
        let text = missing.to_string();
        assert!(
            text.starts_with("AWS_PROFILE=nope: no [nope] in "),
            "{text}"
        );
        assert!(
            text.contains(".aws/config") && !text.contains('\n'),
            "{text}"
        );
        // Files named by the environment; none at all is no profile.
        let other = ("AWS_CONFIG_FILE", aws.join("absent").display().to_string());
        let only_credentials = load_with(&[
            home.clone(),
            other.clone(),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                aws.join("none").display().to_string(),
            ),
        ])
        .unwrap();
        assert_eq!(only_credentials, None);
        assert_eq!(load_with(&[]).unwrap(), None);
    }
}
