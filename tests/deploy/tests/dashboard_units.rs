//! The dashboard shows every event in its unit: a panel of event rates
//! shows `*_bytes` series in bytes per second and the others in counts per
//! second; totals of byte events are in their own table, in bytes; no
//! panel labels events "ops". SM utilization is spelled as the ecosystem
//! spells it. (Static: the queries' data is checked by `dashboard.rs`.)

use serde_json::Value;

fn panels() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/gpupm.json"
    ))
    .expect("the dashboard");
    let d: Value = serde_json::from_str(&text).expect("JSON");
    d["panels"].as_array().expect("panels").clone()
}

fn exprs(p: &Value) -> Vec<String> {
    p["targets"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["expr"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_event_panel_shows_its_unit() {
    let mut rates = 0;
    let mut byte_tables = 0;
    for p in panels() {
        let title = p["title"].as_str().unwrap_or("?");
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        let q = exprs(&p).join(" ");
        assert!(
            !title.contains("utilisation") && !q.contains("utilisation"),
            "{title}: {q}"
        );
        if !q.contains("events") {
            continue;
        }
        assert_ne!(unit, "ops", "{title}: events are not operations");
        if q.contains(":rate5m") {
            rates += 1;
            let bytes = p["fieldConfig"]["overrides"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| {
                    o["matcher"]["options"] == "/_bytes/"
                        && o["properties"][0] == serde_json::json!({"id": "unit", "value": "Bps"})
                });
            assert!(
                bytes || !q.contains("$event"),
                "{title}: byte series are not bytes/s"
            );
        } else if q.contains("event=~\".+_bytes\"") {
            byte_tables += 1;
            assert_eq!(unit, "decbytes", "{title}");
        } else {
            assert!(
                q.contains("event!~\".+_bytes\""),
                "{title}: byte totals among counts: {q}"
            );
        }
    }
    assert!(
        rates >= 3 && byte_tables == 2,
        "{rates} rate panels, {byte_tables} byte tables"
    );
}
