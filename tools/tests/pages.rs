//! `gpupm stat`, `dmon` and `top` read totals through the tenant pages
//! (as a real unprivileged tenant through `setpriv`): the daemon counts one
//! page request per scope and command, however many intervals it shows;
//! the numbers equal what the tenant node answers (`--no-pages`); a VM
//! that is not the tenant's is refused on the page socket and then gets
//! the same message as before from the node.

use std::io::{Read, Write};
use std::net::TcpStream;

use gpupm_test_support::cli::{Fixture, UID_A, VM_A, VM_B};

/// A sample's value from the daemon's metrics.
fn metric(f: &Fixture, series: &str) -> u64 {
    let mut conn = TcpStream::connect(("127.0.0.1", f.metrics_port)).expect("metrics endpoint");
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    // Counters and gauges of whole numbers print without a fraction.
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape"))
}

fn requests(f: &Fixture) -> (u64, u64) {
    (
        metric(f, "gpupm_page_requests_total"),
        metric(f, "gpupm_page_request_errors_total"),
    )
}

#[test]
fn stat_dmon_and_top_read_through_pages_and_agree_with_the_node() {
    let mut f = Fixture::start("pages");
    f.advance_ms(20);
    f.wait_idle();
    let vm = VM_A.to_string();
    let (r0, e0) = requests(&f);

    let paged = f.gpupm_as(UID_A, &["stat", "--vm", &vm, "--json"]).json();
    let (r1, e1) = requests(&f);
    assert_eq!(
        (r1 - r0, e1 - e0),
        (1, 0),
        "stat asked for its VM's page once"
    );
    assert!(metric(&f, "gpupm_pages{kind=\"vm\"}") >= 1);
    let node = f
        .gpupm_as(UID_A, &["stat", "--vm", &vm, "--json", "--no-pages"])
        .json();
    assert_eq!(requests(&f), (r1, e1), "--no-pages asks for no page");
    // The same reading but for the wall-clock time each was taken at.
    let without_time = |mut v: serde_json::Value| {
        v.as_object_mut().expect("an object").remove("timestamp");
        v
    };
    assert_eq!(
        without_time(paged.clone()),
        without_time(node),
        "the page and the node show the same totals"
    );
    assert!(paged["events"]["sm_inst_executed"].as_u64().unwrap() > 0);

    // Five intervals, one page request: dmon reads the mapped page.
    let d = f.gpupm_as(UID_A, &["dmon", "-I", "20", "--count", "5", "--json"]);
    assert_eq!(d.code, 0, "{}", d.err);
    assert_eq!(d.out.lines().count(), 5);
    let (r2, e2) = requests(&f);
    assert_eq!(
        (r2 - r1, e2 - e1),
        (1, 0),
        "dmon asked for its VM's page once"
    );

    // top: one page per VM and active context, whatever the frames.
    let t = f.gpupm_as(
        UID_A,
        &["top", "--headless-frames", "4", "-I", "20", "--no-contexts"],
    );
    assert_eq!(t.code, 0, "{}", t.err);
    let (r3, e3) = requests(&f);
    assert_eq!(
        (r3 - r2, e3 - e2),
        (1, 0),
        "top asked for its VM's page once"
    );
    let list = f.gpupm_as(UID_A, &["list", "--json"]).json();
    let active = list["vms"][0]["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "active")
        .count() as u64;
    assert!(active > 0, "{list}");
    let t = f.gpupm_as(UID_A, &["top", "--headless-frames", "4", "-I", "20"]);
    assert_eq!(t.code, 0, "{}", t.err);
    let (r4, e4) = requests(&f);
    assert_eq!(
        (r4 - r3, e4 - e3),
        (1 + active, 0),
        "top asked for each page once"
    );
    let (r2, e2) = (r4, e4);

    // Someone else's VM: refused on the socket, then the node's answer.
    let foreign = f.gpupm_as(UID_A, &["stat", "--vm", &VM_B.to_string()]);
    assert_eq!(foreign.code, 2);
    assert_eq!(
        foreign.err,
        format!("gpupm: no VM {VM_B} visible to you (it does not exist or is not yours)\n")
    );
    let (r3, e3) = requests(&f);
    assert_eq!((r3 - r2, e3 - e2), (1, 1), "the foreign page was refused");
    f.stop();
}
