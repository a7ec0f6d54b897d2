//! Every `--json` command's long help shows the schema of its output, and
//! the real output (against the real driver and daemon, or the in-process
//! model for `simulate` and the catalogue for `events`) is an instance of
//! what the help shows: every key it writes is documented at that place,
//! with the documented type, and every field not marked optional is there.

use std::collections::BTreeMap;

use gpupm_test_support::bin;
use gpupm_test_support::cli::{finish, spawn_as, Fixture};
use serde_json::Value;

/// One documented field: its type as the help names it, and whether it may
/// be left out.
#[derive(Debug)]
struct Field {
    ty: String,
    optional: bool,
}

/// The schema section of `gpupm CMD --help`, as dotted paths (`vms.vm`;
/// arrays and name-keyed maps add no segment) to fields.
fn documented(cmd: &str) -> BTreeMap<String, Field> {
    let out = std::process::Command::new(bin!(Cli))
        .args([cmd, "--help"])
        .output()
        .expect("run gpupm");
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    let section = help
        .split_once("JSON output (--json)")
        .unwrap_or_else(|| panic!("`gpupm {cmd} --help` shows no JSON schema:\n{help}"))
        .1;
    let mut fields = BTreeMap::new();
    let mut stack: Vec<String> = Vec::new();
    let mut top = None;
    for line in section.lines().skip(1) {
        let indent = line.len() - line.trim_start().len();
        let Some((name, rest)) = line.trim_start().split_once("  ") else {
            continue;
        };
        if name.starts_with('[') {
            continue;
        }
        let level = (indent - *top.get_or_insert(indent)) / 2;
        stack.truncate(level);
        stack.push(name.to_string());
        let ty = rest
            .trim_start()
            .split(" — ")
            .next()
            .unwrap_or("")
            .to_string();
        let optional = ty.ends_with(", optional");
        let ty = ty.trim_end_matches(", optional").to_string();
        fields.insert(stack.join("."), Field { ty, optional });
    }
    assert!(!fields.is_empty(), "no fields in `gpupm {cmd} --help`");
    fields
}

/// Whether `v` is of the help's type `ty` (`integer`, `[T]`, `{NAME: T}`,
/// `"a" | "b"`, `T or null`, …).
fn is_type(v: &Value, ty: &str) -> bool {
    if ty.contains(" or ") {
        return ty.split(" or ").any(|t| is_type(v, t));
    }
    if ty.contains(" | ") {
        return ty
            .split(" | ")
            .any(|t| serde_json::from_str::<Value>(t).is_ok_and(|x| &x == v));
    }
    match ty {
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "object" => v.is_object(),
        t if t.starts_with("{NAME: ") => v
            .as_object()
            .is_some_and(|o| o.values().all(|x| is_type(x, &t[7..t.len() - 1]))),
        t if t.starts_with('[') => v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| is_type(x, &t[1..t.len() - 1]))),
        other => panic!("type {other:?} in the help is not one this test knows"),
    }
}

/// Checks `v` against the fields documented under `path`.
fn conforms(cmd: &str, v: &Value, path: &str, doc: &BTreeMap<String, Field>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Array(items) => items.iter().for_each(|i| conforms(cmd, i, path, doc)),
        Value::Object(o) => {
            let named_map = doc.get(path).is_some_and(|f| f.ty.contains("{NAME: "));
            if named_map {
                o.values().for_each(|x| conforms(cmd, x, path, doc));
                return;
            }
            for (k, x) in o {
                let field = doc
                    .get(&join(k))
                    .unwrap_or_else(|| panic!("gpupm {cmd}: `{}` is not in the help", join(k)));
                assert!(
                    is_type(x, &field.ty),
                    "gpupm {cmd}: `{}` = {x} is not {}",
                    join(k),
                    field.ty
                );
                conforms(cmd, x, &join(k), doc);
            }
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}.")
            };
            for (name, f) in doc.range(prefix.clone()..) {
                let Some(rest) = name.strip_prefix(&prefix) else {
                    break;
                };
                if !rest.contains('.') && !f.optional {
                    assert!(
                        o.contains_key(rest),
                        "gpupm {cmd}: required `{name}` missing in {v}"
                    );
                }
            }
        }
        _ => {}
    }
}

fn check(cmd: &str, out: &str) {
    let doc = documented(cmd);
    let mut lines = 0;
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("gpupm {cmd}: a line is not JSON ({e}): {line}"));
        conforms(cmd, &v, "", &doc);
        lines += 1;
    }
    assert!(lines > 0, "gpupm {cmd} printed nothing");
}

#[test]
fn every_json_output_is_an_instance_of_the_schema_its_help_shows() {
    let sim = gpupm_test_support::cli::run_as(
        None,
        &[
            "simulate".into(),
            "--json".into(),
            "--duration-ms".into(),
            "5".into(),
        ],
    );
    assert_eq!(sim.code, 0, "{}", sim.err);
    check("simulate", &sim.out);
    let events = gpupm_test_support::cli::run_as(None, &["events".into(), "--json".into()]);
    check("events", &events.out);
    let plan = gpupm_test_support::cli::run_as(None, &["plan".into(), "--json".into()]);
    assert_eq!(plan.code, 0, "{}", plan.err);
    check("plan", &plan.out);

    let mut f = Fixture::start("json-schemas");
    f.advance_ms(20);
    let ok = |f: &Fixture, args: &[&str]| {
        let r = f.gpupm(args);
        assert_eq!(r.code, 0, "gpupm {args:?}: {}", r.err);
        r.out
    };
    check("stat", &ok(&f, &["stat", "--vm", "1", "--json"]));
    check(
        "stat",
        &ok(
            &f,
            &["stat", "--ctx", "1", "--json", "-I", "50", "--count", "2"],
        ),
    );
    check("list", &ok(&f, &["list", "--json", "--all"]));
    let dmon = ok(&f, &["dmon", "--json", "-I", "50", "--count", "2"]);
    assert_eq!(dmon.lines().count(), 2, "one object per interval: {dmon}");
    check("dmon", &dmon);
    let cfg = f.config.display().to_string();
    // Exit 1 is a WARN (a verdict, not a failure to answer).
    let health = f.gpupm(&["health", "--config", &cfg, "--json"]);
    assert!([0, 1].contains(&health.code), "health: {}", health.err);
    check("health", &health.out);
    check("bmc", &ok(&f, &["bmc", "--json"]));
    // `gpupm cpi` as tenant A on its own context that runs a program.
    let ctx = f.program_context(gpupm_test_support::cli::VM_A);
    let args: Vec<String> = [
        "cpi",
        "--ctx",
        &ctx.to_string(),
        "--samples",
        "3000",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["--tenant-node".into(), f.node()])
    .collect();
    let mut child = spawn_as(Some(gpupm_test_support::cli::UID_A), &args);
    while child.try_wait().expect("try_wait").is_none() {
        f.advance_ms(1);
    }
    let cpi = finish(child);
    assert_eq!(cpi.code, 0, "cpi: {}", cpi.err);
    let doc: Value = serde_json::from_str(&cpi.out).expect("cpi JSON");
    assert!(
        doc["samples"].as_u64().is_some_and(|n| n >= 3000),
        "{}",
        cpi.out
    );
    // Not `lost == 0`: this test owns the step clock and advances it 1 ms
    // at a time whatever the load, so the session's queue may overflow
    // (counted, not hidden); loss accounting is proven by plan_sizing and
    // the sampling end-to-end test. Here the count only has to be a number.
    assert!(doc["lost"].is_u64(), "{}", cpi.out);
    assert!(
        doc["kernels"][0]["cpi"].as_f64().is_some_and(|c| c >= 1.0),
        "{}",
        cpi.out
    );
    check("cpi", &cpi.out);
    let rec = f.tmp.join("json-schemas.gpupm").display().to_string();
    let args: Vec<String> = ["record", "--vm", "1", "-o", &rec, "--duration", "500ms"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--tenant-node".into(), f.node()])
        .collect();
    let mut child = spawn_as(None, &args);
    while child.try_wait().expect("try_wait").is_none() {
        f.advance_ms(5);
    }
    let recorded = finish(child);
    assert_eq!(recorded.code, 0, "record: {}", recorded.err);
    let report = ok(&f, &["report", &rec, "--json"]);
    let doc: Value = serde_json::from_str(&report).expect("report JSON");
    assert!(
        !doc["contexts"].as_array().expect("contexts").is_empty(),
        "the recording has commits to report: {report}"
    );
    check("report", &report);

    f.stop();
}
