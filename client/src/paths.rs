//! Well-known paths and names: where the driver serves the device node,
//! where the daemon serves the tenant node, and what the files and stored
//! descriptors are called. Every default here can be overridden (command
//! line options, `gpupmd.toml`); these are the values the systemd units use.

/// Directory of the device node, as `gpupm-driver` mounts it.
pub const DEFAULT_NODE_DIR: &str = "/run/gpupm/dev";
/// File name of the register/control node in the node directory.
pub const CARD_NAME: &str = "card0";
/// File name of the out-of-band (mailbox) node in the node directory.
pub const OOB_NAME: &str = "card0-oob";
/// Device name of the character device the CUSE transport creates.
pub const CUSE_DEVNAME: &str = "gpupm0";
/// The character device's path (`/dev/` + [`CUSE_DEVNAME`]).
pub const DEFAULT_CUSE_NODE: &str = "/dev/gpupm0";
/// Directory of the tenant node, as `gpupmd` mounts it.
pub const DEFAULT_TENANT_DIR: &str = "/run/gpupm/tenant";
/// File name of the tenant node in its directory.
pub const TENANT_NODE_NAME: &str = "node";
/// The tenant node's full default path.
pub const DEFAULT_TENANT_NODE: &str = "/run/gpupm/tenant/node";
/// Directory of the daemon's tenant pages: the page socket and, in a
/// private subdirectory, the page files (docs/pages.md).
pub const DEFAULT_PAGES_DIR: &str = "/run/gpupm/pages";
/// The page socket's full default path.
pub use gpupm_uapi::page::DEFAULT_PAGES_SOCKET;
/// The page socket's file name in the pages directory.
pub use gpupm_uapi::page::PAGES_SOCKET_NAME;
/// The daemon's configuration file when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/gpupm/gpupmd.toml";
/// The journal's native-protocol socket: the services log to journald
/// when it exists.
pub const DEFAULT_JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";
/// Group whose members may use the device node and see everything on the
/// tenant node, when no other admin group is configured.
pub const DEFAULT_ADMIN_GROUP: &str = "gpupm-admin";

/// Name under which `gpupm-mount` stores the device node's `/dev/fuse`
/// descriptor for `gpupm-driver.service` (`--fdname node`).
pub const NODE_FDNAME: &str = "node";
/// Name under which `gpupm-mount` stores the tenant node's descriptor for
/// `gpupmd.service` (`--fdname tenant`).
pub const TENANT_FDNAME: &str = "tenant";

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_default_page_socket_is_the_socket_in_the_default_pages_directory() {
        assert_eq!(
            Path::new(DEFAULT_PAGES_DIR).join(PAGES_SOCKET_NAME),
            Path::new(DEFAULT_PAGES_SOCKET)
        );
    }

    #[test]
    fn the_character_device_lives_in_dev_under_its_name() {
        assert_eq!(
            Path::new("/dev").join(CUSE_DEVNAME),
            Path::new(DEFAULT_CUSE_NODE)
        );
    }

    #[test]
    fn the_default_tenant_node_is_the_node_file_in_the_default_directory() {
        assert_eq!(
            Path::new(DEFAULT_TENANT_DIR).join(TENANT_NODE_NAME),
            Path::new(DEFAULT_TENANT_NODE)
        );
    }
}
