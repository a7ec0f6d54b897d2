//! The web configuration of the authenticated listener, in the format of
//! the Prometheus exporter-toolkit (`--web.config.file` of node_exporter
//! and Prometheus itself), so that an operator's existing file and
//! habits carry over:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # PEM chain, leaf first
//!   key_file: server.key           # PEM private key (PKCS#8, PKCS#1 or SEC1)
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt # PEM roots client certificates must chain to
//!   min_version: TLS12             # TLS12 (default) or TLS13
//!   max_version: TLS13
//! http_server_config:
//!   http2: false                   # HTTP/1.1 only; true is refused
//! basic_auth_users:
//!   prometheus: $2y$10$…           # bcrypt hash (htpasswd -nBC 10 prometheus)
//! ```
//!
//! Relative paths are relative to the file's directory. Keys exporter-toolkit
//! knows that are not offered here (`cipher_suites`, `curve_preferences`,
//! `prefer_server_cipher_suites`, `client_allowed_sans`, inline `cert` and
//! `key`, `headers`) and the client-auth types that verify nothing
//! (`RequestClientCert`, `RequireAnyClientCert`) are refused by name rather
//! than ignored; unknown keys are refused too.
//!
//! The file holds credentials: it, and the key file, must belong to the
//! daemon's user (or root) and give the group and others no access at all.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest web configuration, certificate or key file read (a bound on
/// what a misnamed path can make the daemon load).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why the web configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// A file could not be opened or read.
    #[error("{path}: cannot read it")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A credentials file others may read or change.
    #[error("{path}: mode {mode:04o} gives the group or others access to credentials; chmod 0600 {path}")]
    Exposed {
        /// File.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A credentials file of another user.
    #[error(
        "{path}: owned by uid {owner}; it must belong to the daemon's user (uid {daemon}) or root"
    )]
    Owner {
        /// File.
        path: String,
        /// Its owner.
        owner: u32,
        /// The daemon's effective uid.
        daemon: u32,
    },
    /// A file larger than [`MAX_FILE_BYTES`].
    #[error("{path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge {
        /// File.
        path: String,
    },
    /// Not YAML of the expected shape.
    #[error("{path}:{line}:{col}: {reason}")]
    Syntax {
        /// File.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        reason: String,
    },
    /// A value refused.
    #[error("{path}: {key}: {reason}")]
    Invalid {
        /// File.
        path: String,
        /// The key, dotted (`tls_server_config.min_version`).
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The file as written (exporter-toolkit's keys).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    tls_server_config: Option<FileTls>,
    http_server_config: Option<FileHttp>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    // Known to exporter-toolkit, refused here by name.
    cert: Option<serde_norway::Value>,
    key: Option<serde_norway::Value>,
    client_allowed_sans: Option<serde_norway::Value>,
    cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
    prefer_server_cipher_suites: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHttp {
    http2: Option<bool>,
    headers: Option<serde_norway::Value>,
}

/// Whether and how clients present certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for (`NoClientCert`, the default).
    None,
    /// A certificate, if sent, must chain to the client CA
    /// (`VerifyClientCertIfGiven`): authenticates nobody by itself.
    VerifyIfGiven,
    /// Every client must send a certificate chaining to the client CA
    /// (`RequireAndVerifyClientCert`).
    RequireAndVerify,
}

/// A TLS protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// `tls_server_config`, checked, paths absolute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// Certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Private key (PEM); a credentials file.
    pub key_file: PathBuf,
    /// Client certificates.
    pub client_auth: ClientAuth,
    /// Roots of client certificates (PEM), with `client_auth` other than
    /// [`ClientAuth::None`].
    pub client_ca_file: Option<PathBuf>,
    /// Oldest version offered.
    pub min_version: TlsVersion,
    /// Newest version offered.
    pub max_version: TlsVersion,
}

/// The web configuration, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct WebConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// TLS, if configured.
    pub tls: Option<TlsSettings>,
    /// Basic-auth users and their bcrypt hashes (empty: no basic auth).
    pub users: BTreeMap<String, String>,
}

impl std::fmt::Debug for WebConfig {
    // The hashes are credentials: Debug names the users only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebConfig {
    /// Whether every request must prove who sends it: basic-auth users, or
    /// a client certificate required and verified.
    pub fn authenticates(&self) -> bool {
        !self.users.is_empty()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| t.client_auth == ClientAuth::RequireAndVerify)
    }

    /// Reads and checks `path` (a credentials file: see [`read_private`]).
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let bytes = read_private(path)?;
        let text = String::from_utf8(bytes).map_err(|e| WebConfigError::Syntax {
            path: path.display().to_string(),
            line: 1,
            col: 1,
            reason: format!("not UTF-8 text ({e})"),
        })?;
        Self::parse(path, &text)
    }

    /// Parses `text`, the content of `path` (paths in it are relative to
    /// `path`'s directory).
    pub fn parse(path: &Path, text: &str) -> Result<WebConfig, WebConfigError> {
        let shown = path.display().to_string();
        // An empty file (or one of comments only) is YAML's null: the
        // exporter-toolkit reads it as "nothing configured".
        let file: FileConfig = if text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#') || l == "---"
        }) {
            FileConfig::default()
        } else {
            serde_norway::from_str(text).map_err(|e| {
                let (line, col) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
                WebConfigError::Syntax {
                    path: shown.clone(),
                    line,
                    col,
                    reason: e.to_string(),
                }
            })?
        };
        let invalid = |key: &str, reason: String| WebConfigError::Invalid {
            path: shown.clone(),
            key: key.to_owned(),
            reason,
        };
        let dir = path.parent().unwrap_or(Path::new("/"));
        if let Some(http) = &file.http_server_config {
            if http.http2 == Some(true) {
                return Err(invalid(
                    "http_server_config.http2",
                    "HTTP/2 is not offered (the endpoint speaks HTTP/1.1); remove it or set false"
                        .into(),
                ));
            }
            if http.headers.is_some() {
                return Err(invalid(
                    "http_server_config.headers",
                    "custom response headers are not supported; remove the key".into(),
                ));
            }
        }
        let tls = file
            .tls_server_config
            .as_ref()
            .map(|t| tls_settings(t, dir, &invalid))
            .transpose()?;
        let users = file.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.is_empty() || user.contains(':') {
                return Err(invalid(
                    "basic_auth_users",
                    format!("user name {user:?} is empty or contains ':'"),
                ));
            }
            // The hash itself is never shown: it is a credential.
            crate::metrics::auth::check_hash(hash)
                .map_err(|why| invalid(&format!("basic_auth_users.{user}"), why.to_owned()))?;
        }
        Ok(WebConfig {
            path: path.to_path_buf(),
            tls,
            users,
        })
    }
}

type Refuse<'a> = dyn Fn(&str, String) -> WebConfigError + 'a;

fn tls_settings(
    t: &FileTls,
    dir: &Path,
    invalid: &Refuse<'_>,
) -> Result<TlsSettings, WebConfigError> {
    let refused = [
        (
            "cert",
            t.cert.is_some(),
            "inline certificates are not supported; use cert_file",
        ),
        (
            "key",
            t.key.is_some(),
            "inline keys are not supported; use key_file",
        ),
        (
            "client_allowed_sans",
            t.client_allowed_sans.is_some(),
            "not supported; give the clients' CA its own client_ca_file instead",
        ),
        (
            "cipher_suites",
            t.cipher_suites.is_some(),
            "not supported: rustls offers only its safe defaults; remove the key",
        ),
        (
            "curve_preferences",
            t.curve_preferences.is_some(),
            "not supported: rustls offers only its safe defaults; remove the key",
        ),
        (
            "prefer_server_cipher_suites",
            t.prefer_server_cipher_suites.is_some(),
            "not supported; remove the key",
        ),
    ];
    if let Some((key, _, why)) = refused.iter().find(|(_, set, _)| *set) {
        return Err(invalid(
            &format!("tls_server_config.{key}"),
            (*why).to_owned(),
        ));
    }
    let abs = |p: &PathBuf| {
        if p.is_relative() {
            dir.join(p)
        } else {
            p.clone()
        }
    };
    let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) else {
        return Err(invalid(
            "tls_server_config",
            "cert_file and key_file are both required".into(),
        ));
    };
    let client_auth = match t.client_auth_type.as_deref() {
        None | Some("NoClientCert") => ClientAuth::None,
        Some("VerifyClientCertIfGiven") => ClientAuth::VerifyIfGiven,
        Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerify,
        Some(other @ ("RequestClientCert" | "RequireAnyClientCert")) => {
            return Err(invalid(
                "tls_server_config.client_auth_type",
                format!("{other} accepts certificates it does not verify, which authenticates nobody; use RequireAndVerifyClientCert or VerifyClientCertIfGiven"),
            ))
        }
        Some(other) => {
            return Err(invalid(
                "tls_server_config.client_auth_type",
                format!("{other:?} is none of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
            ))
        }
    };
    let client_ca_file = t.client_ca_file.as_ref().map(abs);
    if client_auth != ClientAuth::None && client_ca_file.is_none() {
        return Err(invalid(
            "tls_server_config.client_ca_file",
            "required to verify client certificates".into(),
        ));
    }
    if client_auth == ClientAuth::None && client_ca_file.is_some() {
        return Err(invalid(
            "tls_server_config.client_ca_file",
            "given without a client_auth_type that verifies client certificates".into(),
        ));
    }
    let version = |key: &str, v: &Option<String>, default| match v.as_deref() {
        None => Ok(default),
        Some("TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(other @ ("TLS10" | "TLS11")) => Err(invalid(
            &format!("tls_server_config.{key}"),
            format!("{other} is not offered (rustls implements TLS12 and TLS13)"),
        )),
        Some(other) => Err(invalid(
            &format!("tls_server_config.{key}"),
            format!("{other:?} is neither TLS12 nor TLS13"),
        )),
    };
    let min_version = version("min_version", &t.min_version, TlsVersion::Tls12)?;
    let max_version = version("max_version", &t.max_version, TlsVersion::Tls13)?;
    if min_version > max_version {
        return Err(invalid(
            "tls_server_config.max_version",
            "older than min_version".into(),
        ));
    }
    Ok(TlsSettings {
        cert_file: abs(cert),
        key_file: abs(key),
        client_auth,
        client_ca_file,
        min_version,
        max_version,
    })
}

/// Reads a file that holds credentials: opened first, then its owner and
/// mode checked on the open descriptor (no window in which another file
/// could take its place). It must belong to the daemon's effective user or
/// root and give the group and others no permission at all.
pub fn read_private(path: &Path) -> Result<Vec<u8>, WebConfigError> {
    let shown = || path.display().to_string();
    let file = File::open(path).map_err(|source| WebConfigError::Read {
        path: shown(),
        source,
    })?;
    let meta = file.metadata().map_err(|source| WebConfigError::Read {
        path: shown(),
        source,
    })?;
    let daemon = nix::unistd::geteuid().as_raw();
    if meta.uid() != daemon && meta.uid() != 0 {
        return Err(WebConfigError::Owner {
            path: shown(),
            owner: meta.uid(),
            daemon,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(WebConfigError::Exposed {
            path: shown(),
            mode,
        });
    }
    read_bounded(file, path)
}

/// Reads a file that holds no secret (a certificate), bounded in size.
pub fn read_public(path: &Path) -> Result<Vec<u8>, WebConfigError> {
    let file = File::open(path).map_err(|source| WebConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    read_bounded(file, path)
}

fn read_bounded(file: File, path: &Path) -> Result<Vec<u8>, WebConfigError> {
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| WebConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(WebConfigError::TooLarge {
            path: path.display().to_string(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
