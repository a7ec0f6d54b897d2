//! A real Prometheus server scraping the authenticated listener over TLS
//! with a client certificate and basic auth, as a fleet's server would.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpupm_test_support::process::KillOnDrop;
use gpupm_test_support::require_tool;
use gpupm_test_support::scrape::http_get;
use gpupm_test_support::web::{write_private, write_web_config, ClientCerts, Pki};
use gpupm_test_support::Scratch;

use crate::fixture::{FixtureView, VM1_SM_INST_EXECUTED};
use crate::harness::{start_authenticated, PASSWORD, USER};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn real_prometheus_scrapes_over_tls_with_a_client_certificate_and_basic_auth() {
    let prometheus = require_tool("prometheus", "prometheus");
    let dir = Scratch::new("prometheus-mtls");
    let pki = Pki::generate(&dir.join("pki"));
    let web = write_web_config(
        &dir.join("web.yml"),
        Some((&pki, ClientCerts::Required)),
        &[(USER, PASSWORD)],
    );
    let (_rt, addr) = start_authenticated(FixtureView::new(3), 64, &web, true).unwrap();
    let password = dir.join("password");
    write_private(&password, PASSWORD);
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpupm\n    scheme: https\n    tls_config:\n      ca_file: {:?}\n      cert_file: {:?}\n      key_file: {:?}\n\
             \x20   basic_auth:\n      username: {USER}\n      password_file: {:?}\n    static_configs:\n      - targets: ['{addr}']\n",
            pki.server_ca.display().to_string(),
            pki.client.cert.display().to_string(),
            pki.client.key.display().to_string(),
            password.display().to_string(),
        ),
    )
    .unwrap();
    let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={api}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let mut server = KillOnDrop(child, "prometheus");

    let query = r#"gpupm_vm_events_total{vm="1",event="sm_inst_executed"}"#;
    let target = format!("/api/v1/query?query={}", url_encode(query));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("no answer yet");
    let answered = loop {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "prometheus exited ({status}); log: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            break None;
        }
        if TcpStream::connect(api).is_ok() {
            let (_, _, body) = http_get(api, &target, None);
            let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if let Some(v) = json["data"]["result"][0]["value"][1].as_str() {
                break Some(v.to_owned());
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(server);
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    assert_eq!(
        answered,
        Some(VM1_SM_INST_EXECUTED.to_string()),
        "last answer: {last}\nprometheus log:\n{log}"
    );
}
