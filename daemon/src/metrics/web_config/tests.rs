//! The web configuration's checks: parsing, refusals by name, hashes
//! never shown, credentials files others may read.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn hash() -> String {
    bcrypt::hash("secret", 4).unwrap()
}

fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
    WebConfig::parse(Path::new("/etc/gpupm/web.yml"), text)
}

fn reason(e: WebConfigError) -> String {
    e.to_string()
}

#[test]
fn exporter_toolkit_files_parse_with_paths_beside_the_file() {
    let c = parse(&format!(
        "tls_server_config:\n  cert_file: s.crt\n  key_file: /k/s.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\nbasic_auth_users:\n  prom: {}\n",
        hash()
    ))
    .unwrap();
    let tls = c.tls.as_ref().unwrap();
    assert_eq!(tls.cert_file, PathBuf::from("/etc/gpupm/s.crt"));
    assert_eq!(tls.key_file, PathBuf::from("/k/s.key"));
    assert_eq!(tls.client_ca_file, Some(PathBuf::from("/etc/gpupm/ca.crt")));
    assert_eq!(tls.client_auth, ClientAuth::RequireAndVerify);
    assert_eq!(
        (tls.min_version, tls.max_version),
        (TlsVersion::Tls13, TlsVersion::Tls13)
    );
    assert_eq!(c.users.len(), 1);
    assert!(c.authenticates());
    let shown = format!("{c:?}");
    assert!(shown.contains("prom") && !shown.contains("$2b$"), "{shown}");
    let empty = parse("# nothing yet\n").unwrap();
    assert!(empty.tls.is_none() && !empty.authenticates());
}

#[test]
fn the_shipped_example_parses() {
    let text = include_str!("../../../../packaging/metrics-web.yml");
    let c = parse(text).unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.key_file, PathBuf::from("/etc/gpupm/metrics.key"));
    assert_eq!(tls.client_auth, ClientAuth::None);
    assert!(c.users.is_empty());
}

#[test]
fn syntax_errors_name_line_and_column() {
    let e = parse("basic_auth_users:\n  prom: [1\n").unwrap_err();
    assert!(
        matches!(
            e,
            WebConfigError::Syntax { line: 3, .. } | WebConfigError::Syntax { line: 2, .. }
        ),
        "{e}"
    );
    let e = parse("tls_server_config:\n  certfile: x\n").unwrap_err();
    match e {
        WebConfigError::Syntax {
            line, col, reason, ..
        } => {
            assert_eq!((line, col), (2, 3), "{reason}");
            assert!(reason.contains("certfile"), "{reason}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn what_authenticates_nobody_or_is_not_offered_is_refused_by_name() {
    let tls = "tls_server_config:\n  cert_file: a\n  key_file: b\n";
    for (extra, key) in [
        (
            "  client_auth_type: RequireAnyClientCert\n  client_ca_file: c\n",
            "client_auth_type",
        ),
        (
            "  client_auth_type: RequestClientCert\n",
            "client_auth_type",
        ),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "client_ca_file",
        ),
        ("  client_ca_file: c\n", "client_ca_file"),
        ("  min_version: TLS11\n", "min_version"),
        (
            "  min_version: TLS13\n  max_version: TLS12\n",
            "max_version",
        ),
        (
            "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
            "cipher_suites",
        ),
        ("  client_allowed_sans: [a]\n", "client_allowed_sans"),
    ] {
        let e = reason(parse(&format!("{tls}{extra}")).unwrap_err());
        assert!(e.contains(key), "{extra}: {e}");
    }
    assert!(
        reason(parse("tls_server_config:\n  cert_file: a\n").unwrap_err()).contains("key_file")
    );
    assert!(reason(parse("http_server_config:\n  http2: true\n").unwrap_err()).contains("http2"));
    assert!(parse("http_server_config:\n  http2: false\n").is_ok());
}

#[test]
fn bad_hashes_are_refused_without_being_shown() {
    let secretish = "$2b$04$notabcrypthash";
    let e = reason(parse(&format!("basic_auth_users:\n  prom: {secretish}\n")).unwrap_err());
    assert!(e.contains("basic_auth_users.prom"), "{e}");
    assert!(!e.contains(secretish), "{e}");
    let e = reason(parse(&format!("basic_auth_users:\n  \"a:b\": {}\n", hash())).unwrap_err());
    assert!(e.contains("a:b"), "{e}");
    let plain = reason(parse("basic_auth_users:\n  prom: hunter2\n").unwrap_err());
    assert!(!plain.contains("hunter2"), "{plain}");
}

#[test]
fn credentials_files_others_can_read_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, "").unwrap();
    for mode in [0o644, 0o640, 0o604, 0o620] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = WebConfig::load(&path).unwrap_err();
        assert!(matches!(e, WebConfigError::Exposed { .. }), "{mode:o}: {e}");
        assert!(e.to_string().contains("chmod 0600"), "{e}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    WebConfig::load(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    WebConfig::load(&path).unwrap();
    // Another user's file (the tests run as root, as CI does).
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None)
        .expect("chown needs root: run the tests as root");
    let e = WebConfig::load(&path).unwrap_err();
    assert!(
        matches!(e, WebConfigError::Owner { owner: 65534, .. }),
        "{e}"
    );
}
