//! Who may use the device node.
//!
//! The node files carry owner root and mode 0600 (0660 with the admin group),
//! so the kernel refuses other openers; independently the transport checks
//! the kernel-supplied credentials of every request, so a chmod mistake on
//! the mount cannot expose the device. Supplementary groups come from
//! `/proc/<pid>/status` of the caller ([`procfs::supplementary_groups`]):
//! a process that is gone has none, which denies, never allows.

use std::fs;

use gpupm_fusemount::procfs;

use super::error::NodeError;

/// Group that may use the node when `--admin-gid` is not given.
pub use gpupm_client::paths::DEFAULT_ADMIN_GROUP;

/// Credentials of one request, as the kernel supplied them.
pub use gpupm_fusemount::Caller;

/// The admin uid (always root) and optional admin group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessPolicy {
    admin_gid: Option<u32>,
}

impl AccessPolicy {
    /// Root only, plus members of `admin_gid` when given.
    pub fn new(admin_gid: Option<u32>) -> Self {
        AccessPolicy { admin_gid }
    }

    /// The configured admin group.
    pub fn admin_gid(&self) -> Option<u32> {
        self.admin_gid
    }

    /// Mode bits of the device files.
    pub fn file_mode(&self) -> u16 {
        if self.admin_gid.is_some() {
            0o660
        } else {
            0o600
        }
    }

    /// Allows root and members (primary or supplementary) of the admin group.
    pub fn check(&self, caller: Caller) -> Result<(), NodeError> {
        if caller.uid == 0 {
            return Ok(());
        }
        if let Some(gid) = self.admin_gid {
            if caller.gid == gid || procfs::supplementary_groups(caller.pid).contains(&gid) {
                return Ok(());
            }
        }
        Err(NodeError::AccessDenied {
            uid: caller.uid,
            gid: caller.gid,
        })
    }
}

/// Looks up a group id by name in `/etc/group`.
pub fn group_id(name: &str) -> Option<u32> {
    let groups = fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_always_allowed_and_others_only_by_group() {
        let root_only = AccessPolicy::new(None);
        let nobody = Caller {
            uid: 65534,
            gid: 65534,
            pid: 0,
        };
        assert!(root_only
            .check(Caller {
                uid: 0,
                gid: 5,
                pid: 0
            })
            .is_ok());
        assert!(root_only.check(nobody).is_err());
        assert!(AccessPolicy::new(Some(65534)).check(nobody).is_ok());
        assert!(AccessPolicy::new(Some(1234)).check(nobody).is_err());
        assert_eq!(root_only.file_mode(), 0o600);
    }
}
