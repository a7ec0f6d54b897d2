//! The device's identity, from the scenario's `[identity]` through the
//! identity registers and the device node to what `gpupm list` and
//! `gpupm health` show, as JSON and as text; and what a tenant, who
//! cannot read the device node, is shown of it: nothing.

use gpupm_test_support::cli::{Fixture, UID_A};
use serde_json::{json, Value};

#[test]
fn list_and_health_show_the_identity_the_scenario_gives_the_device() {
    let scenario = gpupm_test_support::Scratch::new("identity-scenario");
    let path = scenario.join("host.toml");
    std::fs::write(
        &path,
        format!(
            "{}\n[identity]\nindex = 6\npci_address = \"0000:ba:00.0\"\n\
             uuid = \"GPU-0f1e2d3c-4b5a-8697-a8b9-cadbecfd0e1f\"\nserial = \"1654123456789\"\n\
             model = \"H100 SXM5 80GB\"\n",
            gpupm_driver::scenario::BUILTIN_TOML
        ),
    )
    .unwrap();
    let mut f = Fixture::start_with("identity", &["--scenario", path.to_str().unwrap()]);
    f.advance_ms(2);
    let want = json!({
        "index": 6,
        "uuid": "GPU-0f1e2d3c-4b5a-8697-a8b9-cadbecfd0e1f",
        "pci_address": "0000:ba:00.0",
        "model": "H100 SXM5 80GB",
        "serial": "1654123456789",
    });
    let list = f.gpupm(&["list", "--json"]).json();
    assert_eq!(list["gpu"], want, "{list}");
    let cfg = f.config.display().to_string();
    let health: Value = serde_json::from_str(&f.gpupm(&["health", "--config", &cfg, "--json"]).out)
        .expect("health JSON");
    assert_eq!(health["device"]["gpu"], want, "{health}");
    let text = f.gpupm(&["list"]).out;
    assert_eq!(
        text.lines().next(),
        Some(
            "GPU 6: H100 SXM5 80GB (UUID: GPU-0f1e2d3c-4b5a-8697-a8b9-cadbecfd0e1f, \
             PCI 0000:ba:00.0, serial 1654123456789)"
        ),
        "{text}"
    );
    // A tenant cannot open the device node: its listing names no device.
    let tenant = f.gpupm_as(UID_A, &["list", "--json"]).json();
    assert!(tenant.get("gpu").is_none(), "{tenant}");
    assert!(
        !tenant["vms"].as_array().expect("vms").is_empty(),
        "{tenant}"
    );
}
