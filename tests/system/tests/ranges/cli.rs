//! `gpupm ranges` and `gpupm callgraph` as tenant A runs them.

use std::collections::BTreeMap;

use gpupm_test_support::users::Cred;
use serde_json::Value;

use crate::fixture::UID_A;

/// `gpupm callgraph --folded` parsed back equals `--json`, and `gpupm
/// ranges list --json` shows the ranges hottest first (as tenant A).
pub(crate) fn cli_folded_and_json_agree(node: &std::path::Path, ctx: u32) {
    let cli = gpupm_test_support::bin!(Cli);
    let run = |args: &[&str]| -> String {
        let out = Cred::user(UID_A)
            .command(&cli)
            .arg("--tenant-node")
            .arg(node)
            .args(args)
            .output()
            .expect("gpupm runs");
        assert!(
            out.status.success(),
            "gpupm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let ctx_s = ctx.to_string();
    let json: Value =
        serde_json::from_str(&run(&["callgraph", "--ctx", &ctx_s, "--json"])).expect("JSON");
    let folded = run(&["callgraph", "--ctx", &ctx_s, "--folded"]);
    let mut from_folded: BTreeMap<Vec<u64>, u64> = BTreeMap::new();
    for line in folded.lines() {
        let (path, count) = line.rsplit_once(' ').expect("`PATH COUNT`");
        let frames = path
            .split(';')
            .map(|k| {
                k.strip_prefix('k')
                    .expect("k<index>")
                    .parse()
                    .expect("index")
            })
            .collect();
        assert!(from_folded
            .insert(frames, count.parse().expect("count"))
            .is_none());
    }
    let from_json: BTreeMap<Vec<u64>, u64> = json["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| {
            let frames = s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_u64().unwrap())
                .collect();
            (frames, s["count"].as_u64().unwrap())
        })
        .collect();
    assert!(!from_json.is_empty());
    assert_eq!(from_folded, from_json, "--folded and --json disagree");
    assert_eq!(
        from_json.values().sum::<u64>(),
        json["crossings"].as_u64().unwrap() - json["stacks_dropped"].as_u64().unwrap()
    );
    let list: Value =
        serde_json::from_str(&run(&["ranges", "--ctx", &ctx_s, "list", "--json"])).expect("JSON");
    let counts: Vec<u64> = list["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "not hottest first: {counts:?}"
    );
}
