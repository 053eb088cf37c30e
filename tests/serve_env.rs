//! Configuration from the environment, for containers: every `kiln serve`
//! flag has a `KILN_*` variable, listed in `--help`; a flag on the command
//! line wins over its variable.

mod common;

use common::*;

#[test]
fn help_lists_a_variable_for_every_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "listen",
        "listen-tls",
        "tls-cert",
        "tls-key",
        "tls-self-signed",
        "redirect-https",
        "io",
        "threads",
        "max-connections",
        "access-log",
        "access-log-format",
        "metrics",
        "preload",
        "mlock",
        "no-security-headers",
        "hsts",
        "header-timeout",
        "keepalive-timeout",
        "send-timeout",
        "shutdown-delay",
        "user",
        "no-sandbox",
        "watch",
        "poll",
        "compression",
        "no-http3",
        "alt-svc-max-age",
        "quic-retry",
        "quic-host-key",
        "tls-ticket-keys",
        "tls-ticket-key-period",
    ] {
        let var = format!("KILN_{}", flag.to_uppercase().replace('-', "_"));
        assert!(help.contains(&format!("--{flag}")), "--{flag} in:\n{help}");
        assert!(help.contains(&format!("[env: {var}=")), "{var} in:\n{help}");
    }
    assert!(help.contains("[env: KILN_SITE="), "{help}");
}

#[test]
fn the_environment_configures_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::launch(
        &[],
        Launch {
            listen: Vec::new(),
            env: vec![
                ("KILN_SITE", pack.to_str().unwrap().to_string()),
                ("KILN_LISTEN", "127.0.0.1:0,127.0.0.2:0".to_string()),
                ("KILN_THREADS", "3".to_string()),
                ("KILN_NO_SECURITY_HEADERS", "true".to_string()),
                ("KILN_HSTS", "false".to_string()),
            ],
            ..Launch::default()
        },
    );
    assert!(
        server.startup.contains("with 3 threads"),
        "{}",
        server.startup
    );
    // Both addresses of the list.
    assert_eq!(
        server.startup.matches("http://127.0.0.").count(),
        2,
        "{}",
        server.startup
    );
    let r = server.get("/hello.txt", "");
    assert_eq!(r.body, HELLO);
    assert_eq!(r.header("X-Content-Type-Options"), None, "{}", r.head);
    assert_eq!(r.header("Strict-Transport-Security"), None, "{}", r.head);
}

#[test]
fn flags_win_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let other = dir.path().join("other.pack");
    version_pack(&other, "from the environment");
    let server = Server::launch(
        &[pack.to_str().unwrap(), "--threads", "2"],
        Launch {
            env: vec![
                ("KILN_SITE", other.to_str().unwrap().to_string()),
                ("KILN_THREADS", "3".to_string()),
                // A list from the environment gives way to the flag's.
                ("KILN_LISTEN", "127.0.0.1:1".to_string()),
            ],
            ..Launch::default()
        },
    );
    assert!(
        server.startup.contains("with 2 threads"),
        "{}",
        server.startup
    );
    assert!(
        !server.startup.contains("127.0.0.1:1/"),
        "{}",
        server.startup
    );
    assert_eq!(server.get("/hello.txt", "").body, HELLO);
}

#[test]
fn a_bad_value_in_the_environment_names_the_variable() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--dummy"])
        .env("KILN_THREADS", "many")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'many'") && stderr.contains("--threads"),
        "{stderr}"
    );
}

#[test]
fn on_off_variables_take_the_usual_words() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    for (value, off) in [
        ("yes", true),
        ("1", true),
        ("On", true),
        ("no", false),
        ("0", false),
    ] {
        let server = Server::launch(
            &[pack.to_str().unwrap()],
            Launch {
                env: vec![("KILN_NO_SECURITY_HEADERS", value.to_string())],
                ..Launch::default()
            },
        );
        let r = server.get("/hello.txt", "");
        assert_eq!(
            r.header("X-Content-Type-Options").is_none(),
            off,
            "KILN_NO_SECURITY_HEADERS={value}: {}",
            r.head
        );
    }
}

#[test]
fn a_bad_on_off_value_names_the_variable() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--dummy"])
        .env("KILN_WATCH", "maybe")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KILN_WATCH=maybe: not a yes or no") && !stderr.contains("--watch"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
