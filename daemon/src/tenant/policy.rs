//! Who a caller is: the admin, a tenant with its VMs, or nobody.
//!
//! The identity is derived for every request from the credentials the
//! kernel supplied with it. Supplementary groups come from
//! `/proc/<pid>/status` of the calling process; when that cannot be read
//! (the process is gone) the caller has no supplementary groups, which can
//! only take rights away.

use gpupm_fusemount::procfs::supplementary_groups;

use super::TenantPolicy;
use crate::view::{Caller, VmId};

/// What one caller may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Root or a member of the admin group: everything.
    Admin,
    /// A tenant: these VMs, sorted, no duplicates (none: an unmapped
    /// caller, see [`Identity::is_unmapped`]).
    Tenant(Vec<VmId>),
}

impl Identity {
    /// Whether the caller may see VM `vm` (says nothing about its existence).
    pub fn may_see_vm(&self, vm: VmId) -> bool {
        match self {
            Identity::Admin => true,
            Identity::Tenant(vms) => vms.binary_search(&vm).is_ok(),
        }
    }

    /// Whether this is the admin.
    pub fn is_admin(&self) -> bool {
        matches!(self, Identity::Admin)
    }

    /// Whether the caller is mapped to nothing: neither the admin nor
    /// named by any `[[tenant]]` entry. Such a caller is no tenant at all:
    /// the node refuses its open and every request it makes with EACCES,
    /// as the device node does with a caller it does not admit.
    pub fn is_unmapped(&self) -> bool {
        matches!(self, Identity::Tenant(vms) if vms.is_empty())
    }
}

/// The configured policy, prepared for lookups.
#[derive(Clone, Debug)]
pub struct Policy {
    config: TenantPolicy,
    /// Whether any rule depends on group membership.
    uses_groups: bool,
}

impl Policy {
    /// Prepares `config`.
    pub fn new(config: TenantPolicy) -> Self {
        let uses_groups =
            config.admin_gid.is_some() || config.tenants.iter().any(|t| t.gid.is_some());
        Policy {
            config,
            uses_groups,
        }
    }

    /// The identity of `caller`.
    pub fn identify(&self, caller: Caller) -> Identity {
        if caller.uid == 0 {
            return Identity::Admin;
        }
        let groups = if self.uses_groups {
            supplementary_groups(caller.pid)
        } else {
            Vec::new()
        };
        self.identify_groups(caller.uid, caller.gid, &groups)
    }

    /// The identity of a caller whose supplementary groups are known (the
    /// page socket has them from the kernel, `SO_PEERGROUPS`).
    pub fn identify_groups(&self, uid: u32, gid: u32, groups: &[u32]) -> Identity {
        if uid == 0 {
            return Identity::Admin;
        }
        let in_group = |g: u32| gid == g || groups.contains(&g);
        if self.config.admin_gid.is_some_and(in_group) {
            return Identity::Admin;
        }
        let mut vms: Vec<VmId> = self
            .config
            .tenants
            .iter()
            .filter(|t| t.uid == Some(uid) || t.gid.is_some_and(in_group))
            .map(|t| t.vm)
            .collect();
        vms.sort_unstable();
        vms.dedup();
        Identity::Tenant(vms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::TenantMap;

    fn caller(uid: u32, gid: u32) -> Caller {
        Caller { uid, gid, pid: 0 }
    }

    #[test]
    fn tenants_get_exactly_their_mapped_vms_and_root_or_admin_group_everything() {
        let policy = Policy::new(TenantPolicy {
            admin_gid: Some(900),
            tenants: vec![
                TenantMap {
                    vm: 2,
                    uid: Some(1001),
                    gid: None,
                },
                TenantMap {
                    vm: 1,
                    uid: Some(1001),
                    gid: None,
                },
                TenantMap {
                    vm: 3,
                    uid: None,
                    gid: Some(2000),
                },
                TenantMap {
                    vm: 1,
                    uid: None,
                    gid: Some(2000),
                },
            ],
        });
        assert_eq!(policy.identify(caller(0, 0)), Identity::Admin);
        assert_eq!(policy.identify(caller(5, 900)), Identity::Admin);
        assert_eq!(
            policy.identify(caller(1001, 1001)),
            Identity::Tenant(vec![1, 2])
        );
        assert_eq!(
            policy.identify(caller(1002, 2000)),
            Identity::Tenant(vec![1, 3])
        );
        assert_eq!(
            policy.identify(caller(1003, 1003)),
            Identity::Tenant(vec![])
        );
        assert!(!Identity::Tenant(vec![1, 3]).may_see_vm(2));
        assert!(Identity::Admin.may_see_vm(77));
        assert!(policy.identify(caller(1003, 1003)).is_unmapped());
        assert!(!policy.identify(caller(1002, 2000)).is_unmapped());
        assert!(!Identity::Admin.is_unmapped());
    }
}
