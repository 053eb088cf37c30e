//! Listen addresses as people type them: `IP:PORT`, `[IPv6]:PORT`, `:PORT`
//! (every address: `0.0.0.0` and `[::]`), `HOST:PORT` (each address the name
//! resolves to, looked up once, at start). Shared by every flag that takes
//! an address to listen on.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// The forms a value may take, for error messages.
const FORMS: &str = "IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT";

/// The addresses one value stands for, in order, each once; the error says
/// why the value cannot be used (the caller names the flag and the value).
pub fn parse_listen(value: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let Some((host, port)) = value.rsplit_once(':') else {
        return Err(format!("expected {FORMS}"));
    };
    if port.is_empty() {
        return Err(format!("no port; expected {FORMS}"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("port {port:?} is not a number from 0 to 65535"))?;
    if host.is_empty() {
        return Ok(vec![
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
        ]);
    }
    if host.starts_with('[') || host.ends_with(']') {
        return Err(format!("{host} is not a bracketed IPv6 address"));
    }
    if host.contains(':') {
        return Err(format!(
            "an IPv6 address needs brackets, as in [{host}]:{port}"
        ));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{host} is not an IPv4 address"));
    }
    let resolved = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for addr in resolved {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    Ok(addrs)
}

/// What one value asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// `parse_listen`'s addresses.
    pub addrs: Vec<SocketAddr>,
    /// The value named no address itself (`:PORT`, a host name, the
    /// default): an IPv6 address of it the machine cannot bind (no IPv6) is
    /// skipped with a log line instead of failing the start, and port 0
    /// picks one free port for all its addresses.
    pub implied: bool,
}

impl Listen {
    /// Parses one value (see `parse_listen`).
    pub fn parse(value: &str) -> Result<Listen, String> {
        Ok(Listen {
            addrs: parse_listen(value)?,
            implied: value.parse::<SocketAddr>().is_err(),
        })
    }

    /// Without a value: the loopback addresses on `port`, IPv6 if the
    /// machine has it.
    pub fn loopback(port: u16) -> Listen {
        Listen {
            addrs: vec![
                SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
            ],
            implied: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn literal_and_every_address_forms() {
        for (value, expected) in [
            ("127.0.0.1:8080", &["127.0.0.1:8080"][..]),
            ("0.0.0.0:0", &["0.0.0.0:0"]),
            ("[::1]:8080", &["[::1]:8080"]),
            ("[::]:443", &["[::]:443"]),
            ("[fe80::1%1]:80", &["[fe80::1%1]:80"]),
            (":8080", &["0.0.0.0:8080", "[::]:8080"]),
            (":0", &["0.0.0.0:0", "[::]:0"]),
        ] {
            assert_eq!(parse_listen(value), Ok(addrs(expected)), "{value}");
        }
    }

    #[test]
    fn host_names_resolve_to_each_address_once() {
        let found = parse_listen("localhost:8080").unwrap();
        assert!(
            found.contains(&"127.0.0.1:8080".parse().unwrap()),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080)
        );
        let mut unique = found.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), found.len(), "{found:?}");
    }

    #[test]
    fn unusable_values_say_why() {
        for (value, why) in [
            ("8080", "expected IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT"),
            ("localhost", "expected IP:PORT"),
            ("", "expected IP:PORT"),
            ("localhost:", "no port"),
            (":", "no port"),
            (":99999", "port \"99999\" is not a number from 0 to 65535"),
            ("localhost:http", "port \"http\" is not a number"),
            (":-1", "port \"-1\" is not a number"),
            (
                "::1:8080",
                "an IPv6 address needs brackets, as in [::1]:8080",
            ),
            ("[::1]8080:80", "[::1]8080 is not a bracketed IPv6 address"),
            (
                "[nonsense]:80",
                "[nonsense] is not a bracketed IPv6 address",
            ),
            ("300.1.2.3:80", "300.1.2.3 is not an IPv4 address"),
            ("127.0.0.1:", "no port"),
        ] {
            let err = parse_listen(value).unwrap_err();
            assert!(err.starts_with(why), "{value:?}: {err}");
            assert!(!err.contains('\n'), "{value:?}: {err}");
        }
    }

    #[test]
    fn only_typed_addresses_are_required() {
        assert!(!Listen::parse("127.0.0.1:80").unwrap().implied);
        assert!(!Listen::parse("[::1]:80").unwrap().implied);
        assert!(Listen::parse(":80").unwrap().implied);
        assert!(Listen::parse("localhost:80").unwrap().implied);
    }
}
