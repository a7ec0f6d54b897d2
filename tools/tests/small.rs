//! The small things an operator meets first: help that fits 80 columns
//! with the global options apart (and absent where no node is opened),
//! those options before the subcommand or after it, man pages with
//! EXAMPLES, EXIT STATUS, FILES and SEE ALSO, `-I 1s` like `--duration 5s`, suggestions for an
//! unknown event that name the events it is part of, a removed range
//! handle named as the handle (not the context), and a full range table
//! as a refused request (exit 2, like every refused request).

use gpupm_test_support::cli::{run_as, Fixture, UID_A, VM_A};

fn gpupm(args: &[&str]) -> gpupm_test_support::users::Run {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_as(None, &args)
}

/// The subcommands that talk to the nodes, and so take the node options.
const ON_NODES: [&str; 9] = [
    "list", "stat", "top", "dmon", "record", "ri", "ranges", "cpi", "health",
];
/// The subcommands that never open a node: their help lists no node option.
const OFF_NODES: [&str; 5] = ["report", "events", "demo", "plan", "simulate"];

const NODE_OPTIONS: [&str; 4] = [
    "--tenant-node",
    "--node-dir",
    "--pages-socket",
    "--no-pages",
];

#[test]
fn help_fits_80_columns_and_keeps_the_global_options_apart() {
    for sub in ON_NODES.into_iter().chain(OFF_NODES) {
        let help = gpupm(&[sub, "--help"]);
        assert_eq!(help.code, 0, "{sub}: {}", help.err);
        for line in help.out.lines() {
            assert!(line.chars().count() <= 80, "gpupm {sub} --help: {line:?}");
        }
        if OFF_NODES.contains(&sub) {
            for option in NODE_OPTIONS {
                assert!(
                    !help.out.contains(option),
                    "gpupm {sub} --help lists {option}"
                );
            }
            continue;
        }
        let (own, global) = help
            .out
            .split_once("Global options:")
            .unwrap_or_else(|| panic!("gpupm {sub} --help has no Global options:\n{}", help.out));
        assert!(global.contains("--tenant-node"), "{sub}");
        assert!(
            !own.contains("--tenant-node"),
            "gpupm {sub}: a global option among its own"
        );
    }
}

#[test]
fn node_options_are_taken_before_the_subcommand_too_and_only_where_used() {
    for args in [
        &["--tenant-node", "/nonexistent/node", "stat", "--vm", "1"][..],
        &["stat", "--vm", "1", "--tenant-node", "/nonexistent/node"],
        &[
            "--tenant-node",
            "/nonexistent/node",
            "ranges",
            "--ctx",
            "1",
            "list",
        ],
        &[
            "ranges",
            "--ctx",
            "1",
            "list",
            "--tenant-node",
            "/nonexistent/node",
        ],
    ] {
        let r = gpupm(args);
        assert_eq!(
            (r.code, r.err.as_str()),
            (2, "gpupm: no gpupmd: /nonexistent/node does not exist\n"),
            "{args:?}"
        );
    }
    let bmc = gpupm(&["--node-dir", "/nonexistent/dev", "bmc"]);
    assert_eq!(bmc.code, 2);
    assert!(
        bmc.err.contains("/nonexistent/dev/card0-oob"),
        "{}",
        bmc.err
    );
    let simulate = gpupm(&["simulate", "--tenant-node", "/nonexistent/node"]);
    assert_eq!(simulate.code, 2);
    assert!(
        simulate.err.contains("unexpected argument"),
        "{}",
        simulate.err
    );
}

#[test]
fn man_pages_have_examples_exit_status_files_and_see_also() {
    let dir = std::env::temp_dir().join(format!("gpupm-man-{}", std::process::id()));
    let r = gpupm(&["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.err);
    for page in [
        "gpupm.1",
        "gpupm-stat.1",
        "gpupm-dmon.1",
        "gpupm-health.1",
        "gpupm-ranges-add.1",
    ] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        for section in [
            ".SH EXAMPLES",
            ".SH \"EXIT STATUS\"",
            ".SH FILES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(text.contains(section), "{page} lacks {section}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn intervals_take_units_and_unknown_events_name_their_family() {
    // Parsed, then the missing daemon is the error (not the interval).
    for args in [
        &["stat", "--vm", "1", "-I", "1s"][..],
        &["dmon", "-I", "500ms"],
        &["top", "-b", "-I", "2s"],
    ] {
        let r = gpupm(&[args, &["--tenant-node", "/nonexistent/node"][..]].concat());
        assert_eq!(
            (r.code, r.err.as_str()),
            (2, "gpupm: no gpupmd: /nonexistent/node does not exist\n"),
            "{args:?}"
        );
    }
    let bad = gpupm(&["stat", "-I", "soon", "--tenant-node", "/nonexistent/node"]);
    assert_eq!(bad.code, 2);
    assert!(bad.err.contains("invalid interval \"soon\""), "{}", bad.err);
    let cycles = gpupm(&["stat", "-e", "cycles"]);
    assert_eq!(cycles.code, 2);
    assert!(
        cycles.err.starts_with("gpupm: unknown event \"cycles\" (did you mean one of sm_cycles_elapsed, sm_cycles_active"),
        "{}",
        cycles.err
    );
    assert!(!cycles.err.contains("ce_bytes"), "{}", cycles.err);
}

#[test]
fn range_errors_name_what_is_wrong_and_exit_2() {
    let mut f = Fixture::start("small-ranges");
    f.advance_ms(2);
    let ctx = f.program_context(VM_A).to_string();
    let ranges =
        |args: &[&str]| f.gpupm_as(UID_A, &[&["ranges", "--ctx", &ctx][..], args].concat());
    let gone = ranges(&["rm", "8"]);
    assert_eq!(
        (gone.code, gone.err.as_str()),
        (
            2,
            format!("gpupm: no range 8 on context {ctx} (its ranges: none)\n").as_str()
        )
    );
    let mut last = None;
    for i in 0..64u32 {
        let r = ranges(&["add", "--data", &format!("{}-{}", i * 16, i * 16 + 15)]);
        if r.code != 0 {
            last = Some(r);
            break;
        }
    }
    let full = last.expect("the range table fills up");
    assert_eq!(full.code, 2, "{}", full.err);
    assert!(full.err.contains("(ENOSPC)"), "{}", full.err);
    let added = ranges(&["list", "--json"]).json();
    let handle = added["ranges"][0]["handle"].as_u64().unwrap().to_string();
    assert_eq!(ranges(&["rm", &handle]).code, 0);
    let again = ranges(&["rm", &handle]);
    assert_eq!(again.code, 2);
    assert!(
        again.err.starts_with(&format!(
            "gpupm: no range {handle} on context {ctx} (its ranges: "
        )),
        "{}",
        again.err
    );
    f.stop();
}
