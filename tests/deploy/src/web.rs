//! The fleet's metrics credentials, as an operator would set them up: one
//! CA and a server certificate (for 127.0.0.1, where the test nodes
//! listen), one basic-auth user for the Prometheus server; every node's
//! gpupmd reads the same exporter-toolkit web configuration, and the
//! server's scrape job presents the password and trusts the CA. Made per
//! test, thrown away with it.

use std::path::PathBuf;

use gpupm_test_support::web::{write_private, write_web_config, Client, Pki};
use gpupm_test_support::Scratch;

/// The scrape job's user.
pub const USER: &str = "prometheus";
/// Its password (a test's; Prometheus reads it from `password_file`).
const PASSWORD: &str = "fleet-test-password-not-a-secret";

/// Certificates, the web configuration and the password file.
#[derive(Debug)]
pub struct WebAuth {
    /// The certificates.
    pub pki: Pki,
    /// The nodes' web configuration (TLS and basic auth).
    pub web_config: PathBuf,
    /// The password, for Prometheus's `basic_auth.password_file`.
    pub password_file: PathBuf,
    _dir: Scratch,
}

impl WebAuth {
    /// Makes everything in a scratch directory of its own.
    pub fn new() -> WebAuth {
        let dir = Scratch::new("fleet-web");
        let pki = Pki::generate(&dir.join("pki"));
        let web_config = write_web_config(
            &dir.join("metrics-web.yml"),
            Some((&pki, gpupm_test_support::web::ClientCerts::None)),
            &[(USER, PASSWORD)],
        );
        let password_file = dir.join("password");
        write_private(&password_file, PASSWORD);
        WebAuth {
            pki,
            web_config,
            password_file,
            _dir: dir,
        }
    }

    /// A client with the scrape job's credentials.
    pub fn client(&self) -> Client {
        Client::tls(&self.pki, None).basic_auth(USER, PASSWORD)
    }

    /// The scrape job's settings (YAML at the job's indentation, four
    /// spaces): HTTPS trusting the CA, basic auth from the password file.
    pub fn job_settings(&self) -> String {
        format!(
            "    scheme: https\n    tls_config:\n      ca_file: {:?}\n    basic_auth:\n      username: {USER}\n      password_file: {:?}\n",
            self.pki.server_ca.display().to_string(),
            self.password_file.display().to_string()
        )
    }
}

impl Default for WebAuth {
    fn default() -> Self {
        WebAuth::new()
    }
}
