//! Byte events are bytes in the CLI and the metrics (a device count of a
//! multi-bit event is 32 of them); "unit" means one thing in `gpupm
//! events`; `sm_utilization` is spelled as the ecosystem spells it (the old
//! spelling stays in JSON for a while); a device-level event of a VM is
//! `<not supported>`, not 0; `top` without a terminal prints frames whose
//! every total is the scope's.

use gpupm_client::{Scope, TenantClient};
use gpupm_test_support::cli::Fixture;
use gpupm_test_support::scrape;
use gpupm_uapi::events;

#[test]
fn byte_events_are_bytes_and_units_mean_one_thing() {
    let mut f = Fixture::start("live-units");
    f.advance_ms(20);
    let raw = TenantClient::open(std::path::Path::new(&f.node()))
        .expect("tenant node")
        .read_counters(Scope::Vm(1), &[])
        .expect("read");
    let fb = events::by_name("fb_bytes").unwrap();
    let device_count = raw.values[usize::from(fb.id)];
    assert!(device_count > 0);

    let s = f
        .gpupm(&[
            "stat",
            "--vm",
            "1",
            "-e",
            "fb_bytes,sm_cycles_active",
            "--json",
        ])
        .json();
    assert_eq!(s["events"]["fb_bytes"].as_u64(), Some(device_count * 32));
    assert_eq!(s["units"]["fb_bytes"], "bytes");
    assert_eq!(s["units"]["sm_cycles_active"], "cycles");
    assert_eq!(
        s["derived"]["sm_utilization"],
        s["derived"]["sm_utilisation"]
    );
    assert!(s["derived"]["sm_utilization"].is_number(), "{s}");

    // The metrics in bytes too: the local listener serves the device's
    // series (the per-VM ones only an authenticated listener does).
    let system = TenantClient::open(std::path::Path::new(&f.node()))
        .expect("tenant node")
        .read_counters(Scope::System, &[])
        .expect("read the system block");
    let system_count = system.values[usize::from(fb.id)];
    assert!(system_count >= device_count);
    let body = scrape::metrics(([127, 0, 0, 1], f.metrics_port).into());
    let exported = scrape::samples(&body)
        .into_iter()
        .find(|(n, labels, _)| {
            let has = |k: &str, v: &str| labels.iter().any(|(a, b)| a == k && b == v);
            n == "gpupm_device_events_total" && has("event", "fb_bytes")
        })
        .map(|(_, _, v)| v.parse::<f64>().unwrap())
        .expect("the device's fb_bytes in the scrape");
    assert_eq!(exported, (system_count * 32) as f64);

    // One meaning of "unit" in the catalogue.
    let cat = f.gpupm(&["events", "--json"]).json();
    let e = cat
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "fb_bytes")
        .unwrap()
        .clone();
    assert_eq!(
        (&e["unit"], &e["scale"], &e["source"]),
        (&"bytes".into(), &32.into(), &"fb".into())
    );
    let table = f.gpupm(&["events"]);
    let head: Vec<&str> = table
        .out
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = table
        .out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("fb_bytes"))
        .unwrap()
        .split_whitespace()
        .collect();
    let at = |h: &str| head.iter().position(|x| *x == h).unwrap();
    assert_eq!(
        (row[at("UNIT")], row[at("SOURCE")], row[at("SCALE")]),
        ("bytes", "fb", "32")
    );

    // A device-level event of a VM is not counted, not zero.
    let nv = f.gpupm(&[
        "stat",
        "--vm",
        "1",
        "-e",
        "nvlink_rx_flits,sm_cycles_active",
    ]);
    assert!(nv.out.contains("<not supported>"), "{}", nv.out);
    let nv = f
        .gpupm(&["stat", "--vm", "1", "-e", "nvlink_rx_flits", "--json"])
        .json();
    assert_eq!(nv["not_supported"], serde_json::json!(["nvlink_rx_flits"]));
    assert!(nv["events"].get("nvlink_rx_flits").is_none(), "{nv}");
    let sys = f
        .gpupm(&["stat", "--system", "-e", "nvlink_rx_flits", "--json"])
        .json();
    assert!(sys["events"]["nvlink_rx_flits"].is_u64(), "{sys}");

    // Large counts with separators, like perf.
    let text = f.gpupm(&["stat", "--vm", "1", "-e", "sm_cycles_elapsed"]);
    let total = s_total(&f, "sm_cycles_elapsed");
    assert!(
        text.out.contains(&separated(total)),
        "{} not in\n{}",
        separated(total),
        text.out
    );

    // `top` without a terminal: text frames, every VM total the scope's.
    let top = f.gpupm(&["top", "-n", "1", "-I", "50", "--no-contexts"]);
    assert_eq!(top.code, 0, "{}", top.err);
    let lines: Vec<&str> = top.out.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("VM"))
        .expect("a header");
    let col = lines[head].find("INST TOTAL").expect("the total column");
    for l in &lines[head + 1..] {
        let Some(vm) = l
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        if vm == 4 {
            continue; // sealed
        }
        let shown = l[col..].trim().replace(',', "");
        let want = f
            .gpupm(&[
                "stat",
                "--vm",
                &vm.to_string(),
                "-e",
                "sm_inst_executed",
                "--json",
            ])
            .json()["events"]["sm_inst_executed"]
            .as_u64()
            .unwrap();
        assert_eq!(shown, want.to_string(), "VM {vm}: {l}");
    }
    f.stop();
}

fn s_total(f: &Fixture, event: &str) -> u64 {
    f.gpupm(&["stat", "--vm", "1", "-e", event, "--json"])
        .json()["events"][event]
        .as_u64()
        .unwrap()
}

fn separated(v: u64) -> String {
    let d = v.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
