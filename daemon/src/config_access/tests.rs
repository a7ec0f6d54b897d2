//! Files and directories of every mode and owner that matters, checked as
//! root and as an unprivileged daemon user (the tests chown, so they run as
//! root, as CI does).

use std::fs;
use std::os::unix::fs::{chown, symlink, PermissionsExt};
use std::path::Path;

use gpupm_test_support::Scratch;

use super::{check_as, ConfigAccessError, Exposure};

/// The unprivileged daemon user and group of the tests.
const DAEMON: (u32, u32) = (4242, 4243);

fn file(dir: &Path, name: &str, mode: u32, owner: (u32, u32)) -> std::path::PathBuf {
    let p = dir.join(name);
    fs::write(&p, "node_dir = \"/run/gpupm/dev\"\n").unwrap();
    chown(&p, Some(owner.0), Some(owner.1)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn writer(r: Result<Exposure, ConfigAccessError>) -> (String, String) {
    match r {
        Err(ConfigAccessError::Writable { path, who, .. }) => (
            path.file_name().unwrap().to_string_lossy().into_owned(),
            who,
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_packaged_modes_pass_and_a_world_readable_file_is_reported() {
    let s = Scratch::new("config-access");
    let packaged = file(s.path(), "packaged.toml", 0o640, (0, 990));
    assert_eq!(check_as(&packaged, 0, 0).unwrap(), Exposure::Private);
    assert_eq!(
        check_as(&packaged, DAEMON.0, DAEMON.1).unwrap(),
        Exposure::Private
    );
    let readable = file(s.path(), "readable.toml", 0o644, (0, 0));
    assert_eq!(
        check_as(&readable, DAEMON.0, DAEMON.1).unwrap(),
        Exposure::ReadableByOthers { mode: 0o644 }
    );
    // The daemon's own file, group-writable by its own group (umask 002).
    let own = file(s.path(), "own.toml", 0o660, DAEMON);
    assert_eq!(
        check_as(&own, DAEMON.0, DAEMON.1).unwrap(),
        Exposure::Private
    );
}

#[test]
fn a_file_someone_else_may_write_is_refused() {
    let s = Scratch::new("config-access");
    let world = file(s.path(), "world.toml", 0o666, (0, 0));
    assert_eq!(
        writer(check_as(&world, DAEMON.0, DAEMON.1)),
        ("world.toml".into(), "every local user".into())
    );
    let group = file(s.path(), "group.toml", 0o664, (0, 990));
    assert_eq!(
        writer(check_as(&group, DAEMON.0, DAEMON.1)),
        ("group.toml".into(), "the members of group 990".into())
    );
    let stranger = file(s.path(), "stranger.toml", 0o600, (4300, 0));
    assert_eq!(
        writer(check_as(&stranger, DAEMON.0, DAEMON.1)),
        ("stranger.toml".into(), "its owner, uid 4300".into())
    );
    // Root's file is fine for root, a stranger's is not even for root.
    assert_eq!(writer(check_as(&stranger, 0, 0)).1, "its owner, uid 4300");
    let msg = check_as(&world, 0, 0).unwrap_err().to_string();
    assert!(
        msg.contains("every local user") && msg.contains("0666"),
        "{msg}"
    );
}

#[test]
fn a_directory_someone_else_may_write_is_refused_unless_sticky() {
    let s = Scratch::new("config-access");
    let open = s.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let in_open = file(&open, "gpupmd.toml", 0o640, (0, 0));
    assert_eq!(
        writer(check_as(&in_open, 0, 0)),
        ("open".into(), "every local user".into())
    );
    let sticky = s.join("sticky");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    let in_sticky = file(&sticky, "gpupmd.toml", 0o640, (0, 0));
    assert_eq!(check_as(&in_sticky, 0, 0).unwrap(), Exposure::Private);
    let foreign = s.join("foreign");
    fs::create_dir(&foreign).unwrap();
    chown(&foreign, Some(4300), Some(4300)).unwrap();
    let in_foreign = file(&foreign, "gpupmd.toml", 0o640, (0, 0));
    assert_eq!(writer(check_as(&in_foreign, 0, 0)).1, "its owner, uid 4300");
}

#[test]
fn a_symlink_is_checked_where_it_is_and_where_it_points() {
    let s = Scratch::new("config-access");
    let open = s.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let target = file(&open, "real.toml", 0o640, (0, 0));
    let link = s.join("gpupmd.toml");
    symlink(&target, &link).unwrap();
    assert_eq!(
        writer(check_as(&link, 0, 0)),
        ("open".into(), "every local user".into())
    );
    let missing = s.join("missing.toml");
    assert!(matches!(
        check_as(&missing, 0, 0),
        Err(ConfigAccessError::Stat { .. })
    ));
}
