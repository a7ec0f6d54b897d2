//! Stream sessions against the real daemon: sessions opened one after
//! another on the same scope each receive the records committed while they
//! are open.

use gpupm_client::Scope;
use gpupm_client::{ClientError, TenantClient};
use gpupm_test_support::device::step;
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::regs as r;

/// Records a session on `vm` receives while the clock advances `steps` steps.
fn records_while_advancing(
    dev: &gpupm_client::DevNode,
    node: &std::path::Path,
    vm: u32,
    steps: u32,
    daemon: &mut gpupm_test_support::Proc,
) -> usize {
    let client = TenantClient::open_nonblocking(node).expect("open the tenant node");
    client
        .open_stream(Scope::Vm(vm))
        .expect("open a stream session");
    let mut got = 0;
    for _ in 0..steps {
        step(dev, STEP, daemon);
        loop {
            match client.read_deltas(16) {
                Ok(records) if !records.is_empty() => got += records.len(),
                Ok(_) => break,
                Err(ClientError::Read(e)) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(e) => panic!("stream read: {e}"),
            }
        }
    }
    if got == 0 {
        // The daemon drains in order behind context retirements (each with
        // fsyncs), so on a fast step clock the records may still be on
        // their way: wait for them by poll, with a deadline.
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&client),
            nix::poll::PollFlags::POLLIN,
        )];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(10_000u16)).unwrap_or(0) > 0 {
            got += client.read_deltas(16).map_or(0, |r| r.len());
        }
    }
    got
}

#[test]
fn sessions_opened_one_after_another_each_receive_records() {
    let tmp = Scratch::new("streams");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut daemon = start_daemon(&tmp, &daemon_config(&tmp, "[stream]\nwatermark = 4\n"));
    let node = tmp.join("tenant").join("node");
    // Same VM twice, then alternating VMs on different partitions.
    for (session, vm) in [1, 1, 2, 5, 2, 5].into_iter().enumerate() {
        let got = records_while_advancing(&dev, &node, vm, 200, &mut daemon);
        let commits: u64 = (1..=8)
            .map(|p| dev.read64(r::part(p, r::PART_COMMIT_SEQ)).unwrap())
            .sum();
        assert!(
            got > 0,
            "session {session} on VM {vm} received no records ({commits} commits so far)\n{}",
            daemon
                .log()
                .lines()
                .filter(|l| l.contains("DBG"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    driver.stop();
}
