//! `gpupm ri -o FILE` and `gpupm report` end to end: the real driver (step
//! clock, `--debug-ledger`, the built-in scenario) and gpupmd, tenant A
//! recording the report groups of its own context (marker emits on). Once
//! the clock stops, `gpupm report --trace --json` shows every group the
//! device stored (the RI ledger's `stored`) once, numbered 1, 2, …, in
//! (cycle, sequence) order, each at its group's time, the samples SF
//! context cycles apart and the last at the ledger's last sample point;
//! the marker emits in the order they were collected; the summary counts
//! the same. A torn or corrupt kind-4 frame gives one clean error line.

use gpupm_test_support::cli::{Fixture, UID_A, VM_A};
use gpupm_uapi::ioctl::RiLedgerQuery;
use serde_json::Value;

/// SF: few enough groups per 1 ms step that the default buffer never wraps.
const SF: u64 = 100_000;
/// RGS 3: 16 records a group, room for the emits collected between samples.
const RGS: u8 = 3;

/// Records a session of a context of VM A until the device stored 20
/// groups; answers the file and the ledger once the clock stopped.
fn record(f: &mut Fixture) -> (String, RiLedgerQuery) {
    f.advance_ms(2);
    let ctx = f.program_context(VM_A);
    let file = f.tmp.join("ri.gpupm").to_str().unwrap().to_string();
    let (sf, rgs) = (SF.to_string(), RGS.to_string());
    let (run, truth) = f.ri_until_stored(
        UID_A,
        ctx,
        &[
            "--interval",
            &sf,
            "--rgs",
            &rgs,
            "--emit-markers",
            "-o",
            &file,
            "--duration",
            "6s",
        ],
        20,
    );
    assert_eq!(run.code, 0, "{}", run.err);
    assert!(run.out.is_empty(), "{}", run.out);
    (file, truth)
}

#[test]
fn a_recorded_ri_session_reports_every_group_the_ledger_counts() {
    let mut f = Fixture::start_with("ri", &["--debug-ledger"]);
    let (file, truth) = record(&mut f);

    let run = f.gpupm(&["report", &file, "--trace", "--json"]);
    assert_eq!(run.code, 0, "{}", run.err);
    let lines: Vec<Value> = run
        .out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert!(
        lines.iter().all(|l| l["type"] == "ri_record"),
        "{}",
        run.out
    );
    let keys: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["cycle"].as_u64().unwrap(),
                l["sequence"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");

    // Group by group: numbered from 1, begin or timestamp first (its time
    // is every record's cycle), the sample last.
    let mut groups: Vec<Vec<&Value>> = Vec::new();
    for l in &lines {
        let g = l["ri"]["group"].as_u64().unwrap();
        if groups.len() as u64 != g {
            assert_eq!(g, groups.len() as u64 + 1, "{}", run.out);
            groups.push(Vec::new());
        }
        groups.last_mut().unwrap().push(l);
    }
    assert_eq!(groups.len() as u64, truth.stored, "{}", run.out);
    let mut sample_cycles = Vec::new();
    let mut marker_emits = Vec::new();
    for (k, g) in groups.iter().enumerate() {
        let first = &g[0]["ri"]["record"];
        assert_eq!(first["kind"], if k == 0 { "begin" } else { "timestamp" });
        assert!(g.iter().all(|l| l["cycle"] == first["time"]), "{g:?}");
        assert!(g
            .iter()
            .all(|l| l["ri"]["rgs"].as_u64() == Some(u64::from(RGS))));
        let last = &g.last().unwrap()["ri"]["record"];
        assert_eq!(last["kind"], "instruction");
        sample_cycles.push(last["ctx_cycle"].as_u64().unwrap());
        for l in g.iter().filter(|l| l["ri"]["record"]["kind"] == "emit") {
            assert_eq!(l["ri"]["record"]["source"], "marker");
            marker_emits.push(l["ri"]["record"]["data"].as_u64().unwrap());
        }
    }
    assert!(
        sample_cycles.windows(2).all(|w| w[1] - w[0] == SF),
        "{sample_cycles:?}"
    );
    assert_eq!(*sample_cycles.last().unwrap(), truth.last_sample_ctx_cycle);
    // A marker emit carries the marker-block entries so far: in collection
    // order they rise, none twice; the device collected at least as many
    // as the groups hold, less those its collection buffer overwrote.
    assert!(!marker_emits.is_empty(), "no marker emits");
    assert!(
        marker_emits.windows(2).all(|w| w[0] < w[1]),
        "{marker_emits:?}"
    );
    assert!(*marker_emits.last().unwrap() <= truth.emits_marker);
    assert!(marker_emits.len() as u64 <= truth.emits_marker - truth.overwritten);

    let summary: Value =
        serde_json::from_str(&f.gpupm(&["report", &file, "--json"]).out).expect("report JSON");
    let ri = &summary["ri"];
    assert_eq!(ri["groups"].as_u64(), Some(truth.stored), "{summary}");
    assert_eq!(
        (ri["halts"].as_u64(), ri["lost_groups"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(ri["records"]["instruction"].as_u64(), Some(truth.stored));
    assert_eq!(ri["emits_marker"].as_u64(), Some(marker_emits.len() as u64));
    assert_eq!(summary["records"].as_u64(), Some(lines.len() as u64));

    let text = f.gpupm(&["report", &file]);
    assert_eq!(text.code, 0, "{}", text.err);
    let want = format!(
        "runtime instrumentation: {} report groups, 0 halts, 0 groups lost",
        truth.stored
    );
    assert!(text.out.contains(&want), "{}", text.out);
    let trace = f.gpupm(&["report", &file, "--trace"]);
    assert_eq!(trace.code, 0, "{}", trace.err);
    // A header line, then one line per record, the group visible.
    assert_eq!(trace.out.lines().count(), lines.len() + 1, "{}", trace.out);
    assert!(trace
        .out
        .lines()
        .skip(1)
        .all(|l| l.contains(" ri_record ") && l.contains(" group ")));

    torn_and_corrupt_ri_frames_give_one_line_errors(&f, &file);
    f.stop();
}

fn torn_and_corrupt_ri_frames_give_one_line_errors(f: &Fixture, file: &str) {
    let bytes = std::fs::read(file).expect("recording");
    // The first frame (at byte 64) is group 1: frame header, then the RI
    // entry's header (kind u16, rgs u8, halt_reason u8, size u32, …).
    let entry = 64 + 8;
    let patched = |at: usize, v: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("torn", bytes[..bytes.len() - 40].to_vec(), "truncated"),
        (
            "entry size",
            patched(entry + 4, &7u32.to_le_bytes()),
            "corrupt frame at byte 64",
        ),
        (
            "entry kind",
            patched(entry, &9u16.to_le_bytes()),
            "corrupt frame at byte 64",
        ),
        (
            "entry rgs",
            patched(entry + 2, &[RGS + 1]),
            "corrupt frame at byte 64",
        ),
        (
            "short frame",
            // The frame ends inside the group: what follows is no frame.
            patched(64 + 4, &16u32.to_le_bytes()),
            "corrupt frame at byte",
        ),
    ];
    for (name, b, want) in cases {
        let path = f.tmp.join(format!("{}.gpupm", name.replace(' ', "-")));
        std::fs::write(&path, b).expect("write");
        for extra in [&[][..], &["--trace"][..], &["--trace", "--json"][..]] {
            let mut a = vec!["report", path.to_str().unwrap()];
            a.extend(extra);
            let r = f.gpupm(&a);
            assert_eq!(r.code, 2, "{name}: {r:?}");
            assert!(r.out.is_empty(), "{name}: {}", r.out);
            assert!(
                r.err.starts_with("gpupm: ") && r.err.contains(want),
                "{name}: {}",
                r.err
            );
            assert_eq!(r.err.lines().count(), 1, "{name}: {}", r.err);
        }
    }
}
