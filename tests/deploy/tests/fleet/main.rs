//! The fleet view: three `gpupm-driver` + `gpupmd` pairs on private
//! directories and loopback ports, scraped by one real Prometheus server
//! (job `gpupm`, an `instance` label per node) over HTTPS with basic auth
//! on each daemon's authenticated listener (one fleet CA and scrape user,
//! as `deploy/prometheus/gpupm-scrape.yml` sets up), evaluating
//! `deploy/prometheus/` every 500 ms. Each node's unauthenticated local
//! listener meanwhile serves no tenant's series.
//!
//! * At a quiescent point (step clocks stopped, every switch finished,
//!   everything flushed into the blocks) `sum by (event)
//!   (gpupm_device_events_total)` equals the sum of the three devices'
//!   ledgers (`GPUPM_IOC_LEDGER`), and every recording rule holds its
//!   expected value: totals exactly; SM utilisation exactly the ledger's
//!   active per elapsed cycles; each node's per-VM and per-context rates
//!   proportional to the ledger with one factor per node, and the fleet
//!   rate the sum of those (see [`Rates`]). No alert fires.
//! * SIGKILL one daemon by pid: `GpupmDaemonDown` fires for that node
//!   only. Its device counts on meanwhile (its fallback finishes the
//!   switches). Restarted, the daemon is scraped again, the alert ends, and
//!   at the next quiescent point the totals again equal the ledgers: no
//!   count lost, no counter reset seen by Prometheus.
//!
//! The alert rules are loaded with every `for:` shortened to 1 s (the
//! promtool unit tests check the real durations); expressions unchanged.
//! Needs root, `/dev/fuse` and Debian's `prometheus`.

mod fleet_checks;

use std::thread;
use std::time::{Duration, Instant};

use fleet_checks::{check_quiescent, Snapshot};
use gpupm_deploy_tests::device::Device;
use gpupm_deploy_tests::node::Node;
use gpupm_deploy_tests::prometheus::{Prometheus, Target, POLL};
use gpupm_deploy_tests::rules::{self, RECORDING};
use gpupm_deploy_tests::scenario::{scenario, STEP, SWITCH_TIMEOUT};
use gpupm_deploy_tests::wait_until;
use gpupm_deploy_tests::web::WebAuth;
use gpupm_test_support::Scratch;
use gpupm_uapi::regs as r;

/// Name and scenario seed of each node.
const NODES: [(&str, u64); 3] = [("node-a", 21), ("node-b", 22), ("node-c", 23)];
/// The node whose daemon the test kills.
const KILLED: usize = 1;
/// Longest wait for Prometheus to see a state.
const SEEN: Duration = Duration::from_secs(60);
/// Every rate the rules compute must still span the first scrape (their
/// window is 5 minutes): see `fleet_checks::Rates`.
const WINDOW_BUDGET: Duration = Duration::from_secs(270);

/// Steps every node's clock `steps` times, each node in its own thread,
/// waiting after each step until its daemon finished the switches.
fn run(devices: &[Device], nodes: &mut [Node], steps: usize) {
    thread::scope(|s| {
        for (dev, node) in devices.iter().zip(nodes.iter_mut()) {
            s.spawn(move || {
                for _ in 0..steps {
                    assert!(
                        dev.step(STEP, || node.daemon_gone()),
                        "{}: gpupmd died:\n{}",
                        node.name,
                        node.logs()
                    );
                }
            });
        }
    });
}

/// Flushes every device and reads its ledger.
fn quiesce(devices: &[Device]) -> Vec<Snapshot> {
    devices
        .iter()
        .map(|d| {
            d.flush();
            Snapshot::of(d)
        })
        .collect()
}

/// The instances of the alert `name` in `state`.
fn alerting(prom: &Prometheus, name: &str, state: &str) -> Result<Vec<String>, String> {
    let q = format!("ALERTS{{alertname=\"{name}\", alertstate=\"{state}\"}}");
    let mut v: Vec<String> = prom
        .query(&q)?
        .iter()
        .map(|s| s.label("instance").to_owned())
        .collect();
    v.sort();
    Ok(v)
}

#[test]
fn fleet_totals_and_rules_equal_the_ledgers_and_a_killed_daemon_alerts_and_resumes_without_loss() {
    let t0 = Instant::now();
    let auth = WebAuth::new();
    let mut nodes: Vec<Node> = NODES
        .iter()
        .map(|&(name, seed)| Node::start(name, &scenario(seed), "", &auth))
        .collect();
    let devices: Vec<Device> = nodes.iter().map(Node::device).collect();
    let targets: Vec<Target> = nodes
        .iter()
        .map(|n| Target {
            instance: n.name.clone(),
            addr: n.metrics,
        })
        .collect();
    let dir = Scratch::new("fleet-rules");
    let alerts = dir.join("gpupm-alerts.rules.yml");
    assert_eq!(
        rules::alerts_with_for(&alerts, "1s"),
        5,
        "the alerts with a for:"
    );
    let prom = Prometheus::start(&targets, &[rules::path(RECORDING), alerts], &auth);
    let names: Vec<String> = NODES.iter().map(|n| n.0.to_owned()).collect();

    // Every series starts at zero: the devices have not run yet.
    wait_until("every node scraped, at zero", SEEN, POLL, || {
        let totals = prom.query("sum by (instance) (gpupm_device_events_total)")?;
        let mut seen: Vec<String> = totals
            .iter()
            .map(|s| s.label("instance").to_owned())
            .collect();
        seen.sort();
        if seen != names {
            return Err(format!("scraped: {seen:?}"));
        }
        assert!(totals.iter().all(|s| s.value == 0.0), "{totals:?}");
        Ok(())
    });
    let first_scrape = Instant::now();
    let ready = t0.elapsed();
    for node in &nodes {
        let local = node.scrape_local();
        assert!(
            local.contains("gpupm_device_events_total{")
                && !local.contains("vm=\"")
                && !local.contains("ctx=\"")
                && !local.contains("gpupm_vm_")
                && !local.contains("gpupm_context_"),
            "{}: the local listener names a tenant:\n{local}",
            node.name
        );
    }

    run(&devices, &mut nodes, 60);
    let first = quiesce(&devices);
    eprintln!(
        "first quiescent point at {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for (n, s) in NODES.iter().zip(&first) {
        assert_eq!(s.fallbacks, 0, "{}: a switch fell back", n.0);
    }
    check_quiescent(&prom, &first, true);
    assert_eq!(
        prom.query("ALERTS")
            .expect("ALERTS")
            .iter()
            .map(|s| s.label("alertname").to_owned())
            .collect::<Vec<_>>(),
        Vec::<String>::new(),
        "an alert on a healthy fleet"
    );
    let first_checked = t0.elapsed();

    // Kill one daemon; its device runs on and its fallback finishes the
    // switches nobody answers.
    let pid = nodes[KILLED].kill_daemon();
    let killed_at = Instant::now();
    let dev = &devices[KILLED];
    let fallbacks_before = dev.part_sum(r::PART_FALLBACKS);
    for _ in 0..=3 * SWITCH_TIMEOUT / STEP {
        dev.node().advance(STEP).expect("GPUPM_IOC_ADVANCE");
    }
    assert!(
        dev.part_sum(r::PART_FALLBACKS) > fallbacks_before,
        "no switch fell back while gpupmd was down"
    );
    let killed = NODES[KILLED].0;
    wait_until("GpupmDaemonDown fires", SEEN, POLL, || {
        match alerting(&prom, "GpupmDaemonDown", "firing")? {
            v if v == [killed] => Ok(()),
            v => Err(format!("firing for {v:?}")),
        }
    });
    let alert_after = killed_at.elapsed();

    nodes[KILLED].restart_daemon();
    wait_until(
        "the restarted daemon scraped, the alert over",
        SEEN,
        POLL,
        || {
            let up = prom.query(&format!("up{{instance=\"{killed}\"}}"))?;
            let firing = alerting(&prom, "GpupmDaemonDown", "firing")?;
            if up.first().map(|s| s.value) == Some(1.0) && firing.is_empty() {
                Ok(())
            } else {
                Err(format!("up {up:?}, firing {firing:?}"))
            }
        },
    );

    run(&devices, &mut nodes, 30);
    let second = quiesce(&devices);
    for (a, b) in first.iter().zip(&second) {
        assert!(b.system.iter().zip(&a.system).all(|(y, x)| y >= x) && b.system != a.system);
    }
    check_quiescent(&prom, &second, false);
    let resets = prom
        .query(
            "sum(resets(gpupm_device_events_total[5m])) + sum(resets(gpupm_vm_events_total[5m])) \
             + sum(resets(gpupm_context_events_total[5m]))",
        )
        .expect("resets");
    assert_eq!(
        resets.first().map(|s| s.value),
        Some(0.0),
        "a counter went back"
    );
    assert!(
        first_scrape.elapsed() < WINDOW_BUDGET,
        "the test outran the rules' 5-minute window: the rate checks do not hold"
    );
    eprintln!(
        "3 nodes and Prometheus ready in {:.1} s; first quiescent point checked at {:.1} s; \
         gpupmd (pid {pid}) killed: GpupmDaemonDown firing after {:.1} s; \
         second quiescent point checked at {:.1} s",
        ready.as_secs_f64(),
        first_checked.as_secs_f64(),
        alert_after.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
