//! The metrics endpoint's web configuration for tests: certificates made
//! per test (rcgen: a server CA and a server certificate for 127.0.0.1,
//! a client CA with one client, and a stranger's CA with one client), a
//! web configuration file in the exporter-toolkit format with bcrypt
//! users, and an HTTP(S) client that can present a client certificate
//! and basic-auth credentials. Nothing here is a secret worth keeping:
//! every key is made and thrown away by the test that uses it.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct PemPair {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// The certificates of one test, in one directory.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The server CA's certificate (what a client trusts).
    pub server_ca: PathBuf,
    /// The server's certificate (SANs 127.0.0.1 and localhost).
    pub server: PemPair,
    /// The CA client certificates must chain to.
    pub client_ca: PathBuf,
    /// A client of `client_ca`.
    pub client: PemPair,
    /// A client of another CA.
    pub stranger: PemPair,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

fn leaf(
    dir: &Path,
    name: &str,
    issuer: &CertifiedIssuer<'static, KeyPair>,
    server: bool,
) -> PemPair {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    if server {
        params.subject_alt_names = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::DnsName("localhost".try_into().expect("a DNS name")),
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    } else {
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    }
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    let pair = PemPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    fs::write(&pair.cert, cert.pem()).expect("write a certificate");
    write_private(&pair.key, &key.serialize_pem());
    pair
}

/// Writes a credentials file with mode 0600 (the daemon refuses others).
pub fn write_private(path: &Path, text: &str) {
    fs::write(path, text).expect("write a credentials file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
}

impl Pki {
    /// Makes every certificate in `dir`.
    pub fn generate(dir: &Path) -> Pki {
        fs::create_dir_all(dir).expect("the certificate directory");
        let server_ca = ca("gpupm test server CA");
        let client_ca = ca("gpupm test client CA");
        let stranger_ca = ca("someone else's CA");
        let write = |name: &str, issuer: &CertifiedIssuer<'static, KeyPair>| {
            let p = dir.join(name);
            fs::write(&p, issuer.pem()).expect("write a CA certificate");
            p
        };
        Pki {
            server_ca: write("server-ca.crt", &server_ca),
            server: leaf(dir, "server", &server_ca, true),
            client_ca: write("client-ca.crt", &client_ca),
            client: leaf(dir, "client", &client_ca, false),
            stranger: leaf(dir, "stranger", &stranger_ca, false),
        }
    }
}

/// What the web configuration asks of clients' TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// `NoClientCert`.
    None,
    /// `RequireAndVerifyClientCert` against the test's client CA.
    Required,
}

/// Writes an exporter-toolkit web configuration (mode 0600) to `path`:
/// TLS with `pki`'s server certificate if given, and `users` (name,
/// password) as bcrypt hashes of cost 4 (the lowest: tests check the
/// logic, not the cost).
pub fn write_web_config(
    path: &Path,
    tls: Option<(&Pki, ClientCerts)>,
    users: &[(&str, &str)],
) -> PathBuf {
    let mut yaml = String::new();
    if let Some((pki, certs)) = tls {
        writeln!(
            yaml,
            "tls_server_config:\n  cert_file: {:?}\n  key_file: {:?}",
            pki.server.cert.display().to_string(),
            pki.server.key.display().to_string()
        )
        .expect("format");
        if certs == ClientCerts::Required {
            writeln!(
                yaml,
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {:?}",
                pki.client_ca.display().to_string()
            )
            .expect("format");
        }
    }
    if !users.is_empty() {
        yaml.push_str("basic_auth_users:\n");
        for (user, password) in users {
            let hash = bcrypt::hash(password, 4).expect("bcrypt");
            writeln!(yaml, "  {user}: '{hash}'").expect("format");
        }
    }
    write_private(path, &yaml);
    path.to_path_buf()
}

/// An HTTP(S) client of the metrics endpoint.
#[derive(Clone, Debug, Default)]
pub struct Client {
    tls: Option<Arc<rustls::ClientConfig>>,
    basic: Option<(String, String)>,
    headers: Vec<(String, String)>,
}

/// A response: (status code, header lines, body).
pub type Answer = (u16, String, String);

impl Client {
    /// Plain HTTP, no credentials.
    pub fn plain() -> Client {
        Client::default()
    }

    /// TLS trusting `pki`'s server CA, presenting `cert` if given.
    pub fn tls(pki: &Pki, cert: Option<&PemPair>) -> Client {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&pki.server_ca).expect("server CA") {
            roots.add(c.expect("a CA certificate")).expect("a root");
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some(pair) => {
                let chain = CertificateDer::pem_file_iter(&pair.cert)
                    .expect("client certificate")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("a client certificate");
                let key = PrivateKeyDer::from_pem_file(&pair.key).expect("client key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client auth")
            }
        };
        Client {
            tls: Some(Arc::new(config)),
            ..Client::default()
        }
    }

    /// The same client sending `user` and `password` with basic auth.
    pub fn basic_auth(mut self, user: &str, password: &str) -> Client {
        self.basic = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// The same client sending header `name: value` too.
    pub fn header(mut self, name: &str, value: &str) -> Client {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// `GET target` with `Connection: close`; Err when the connection or
    /// the TLS session fails (a refused handshake among them).
    pub fn get(&self, addr: SocketAddr, target: &str) -> Result<Answer, String> {
        let tcp = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        tcp.set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(|e| e.to_string())?;
        let auth = self
            .basic
            .as_ref()
            .map(|(u, p)| {
                format!(
                    "Authorization: Basic {}\r\n",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                )
            })
            .unwrap_or_default();
        let extra: String = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .collect();
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{auth}{extra}Connection: close\r\n\r\n"
        );
        let raw = match &self.tls {
            None => exchange(tcp, &request),
            Some(config) => {
                let name = ServerName::IpAddress(addr.ip().into());
                let conn = rustls::ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| format!("TLS: {e}"))?;
                exchange(rustls::StreamOwned::new(conn, tcp), &request)
            }
        }?;
        let text = String::from_utf8(raw).map_err(|e| format!("not UTF-8: {e}"))?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no response head in {text:?}"))?;
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        let code = status
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("status line {status:?}"))?;
        Ok((code, headers.to_owned(), body.to_owned()))
    }
}

fn exchange(mut s: impl Read + Write, request: &str) -> Result<Vec<u8>, String> {
    s.write_all(request.as_bytes())
        .and_then(|()| s.flush())
        .map_err(|e| format!("send: {e}"))?;
    let mut all = Vec::new();
    match s.read_to_end(&mut all) {
        Ok(_) => Ok(all),
        // A server that closes its TCP side without TLS close_notify after
        // a whole response is still a response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !all.is_empty() => Ok(all),
        Err(e) => Err(format!("receive: {e}")),
    }
}
