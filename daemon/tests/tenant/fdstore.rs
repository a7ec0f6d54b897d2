//! The tenant node served on a descriptor someone else mounted, as under
//! systemd: `gpupm_fusemount::mount` (what `gpupm-mount` runs) mounts the
//! directory, `store_fd` hands the descriptor to a stand-in for the service
//! manager's notify socket (`FDSTORE=1`, `FDNAME=tenant`, `SCM_RIGHTS`,
//! barrier), and [`TenantNode::serve_fd`] serves what was received.
//! Dropping the node leaves the mount; unmounting it is the owner's job.
//!
//! Needs root and `/dev/fuse`.

use std::os::fd::AsFd;
use std::path::Path;
use std::thread;
use std::time::Duration;

use crate::fixture::{policy, require_root_and_fuse, Fixture};
use gpupm_client::TenantClient;
use gpupm_fusemount::notify::NotifyListener;
use gpupm_fusemount::MountOptions;
use gpupmd::tenant::{TenantNode, DEFAULT_THREADS, NODE_NAME, TENANT_FDNAME};

fn mount_type(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    info.lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(&*dir))
        .and_then(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_owned))
}

#[test]
fn tenant_node_serves_a_stored_descriptor_and_leaves_the_mount_to_its_owner() {
    require_root_and_fuse();
    let tmp = std::env::temp_dir().join(format!("gpupm-tenant-fdstore-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let dir = tmp.join("tenant");

    // The helper's half: mount, then store the descriptor with the manager.
    let manager = NotifyListener::bind(tmp.join("notify.sock")).unwrap();
    // The only test in this binary: nothing else reads the environment.
    std::env::set_var("NOTIFY_SOCKET", manager.path());
    let fd = gpupm_fusemount::mount(&dir, &MountOptions::new("gpupm-tenant")).unwrap();
    let store = thread::spawn(move || gpupm_fusemount::store_fd(TENANT_FDNAME, fd.as_fd()));
    let (name, passed) = manager
        .recv_stored(Duration::from_secs(20), || !store.is_finished())
        .expect("a stored descriptor");
    store
        .join()
        .unwrap()
        .expect("store_fd returns after the barrier");
    std::env::remove_var("NOTIFY_SOCKET");
    assert_eq!(name, TENANT_FDNAME);
    assert_eq!(mount_type(&dir).as_deref(), Some("fuse.gpupm-tenant"));

    // The daemon's half: serve the descriptor the manager passed.
    let view = Fixture::new();
    let node = TenantNode::serve_fd(
        &dir,
        passed,
        crate::fixture::served(&view),
        policy(),
        crate::fixture::bounds(),
        DEFAULT_THREADS,
    )
    .expect("serves the passed descriptor");
    let client = TenantClient::open(dir.join(NODE_NAME)).unwrap();
    assert_eq!(client.whoami().unwrap().admin, 1, "root is the admin");
    drop(client);
    drop(node);
    assert_eq!(
        mount_type(&dir).as_deref(),
        Some("fuse.gpupm-tenant"),
        "dropping the node must leave the mount to its owner"
    );

    // The owner's half (`gpupm-mount --unmount`).
    assert!(
        gpupm_fusemount::unmount(&dir).unwrap(),
        "something was mounted"
    );
    assert_eq!(mount_type(&dir), None);
    assert!(!gpupm_fusemount::unmount(&dir).unwrap(), "idempotent");
    drop(manager);
    std::fs::remove_dir_all(&tmp).unwrap();
}
