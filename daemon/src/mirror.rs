//! The device's commit mirror (`gpupm_uapi::mirror`), opened once and
//! shared: the tenant pages follow commits through its block slots
//! (`pages::mirror`) and the drains read stream records from its ring
//! area (`engine::drain`), through one mapping and one trust check.
//!
//! The node names the mirror (`GPUPM_IOC_MIRROR_INFO`); it is used only if
//! both its files pass [`gpupm_client::mirror::open_checked`]: regular
//! files with their directory's owner (root, or the unprivileged driver),
//! no other access, no group write on the mirror, in a directory no group
//! or other may write — a file anyone else could have written is never
//! taken for the device's. The mapping is kept while the node names the
//! same path and the mapped file shows the generation the node answers
//! (a reset changes the generation in the same file; a driver that
//! started again made a new file, whose generation the old one never
//! shows).

use std::sync::{Arc, Mutex};

use gpupm_client::mirror::{MirrorError, MirrorReader};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::mirror::MirrorInfo;
use nix::errno::Errno;

/// A mirror opened and checked, shared by its users.
#[derive(Debug)]
pub struct OpenMirror {
    /// The mapping.
    pub reader: MirrorReader,
    /// The file's path as the node named it.
    path: Vec<u8>,
}

impl OpenMirror {
    /// `reader`, opened from `path` (a mirror the node did not name: the
    /// tests' own).
    pub fn new(reader: MirrorReader, path: impl Into<Vec<u8>>) -> OpenMirror {
        OpenMirror {
            reader,
            path: path.into(),
        }
    }

    /// The mirror file's path as the node named it.
    pub fn path(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

/// What asking the node for its mirror gave.
#[derive(Debug)]
pub enum Offer {
    /// Opened and checked (the mapping already open when the node still
    /// names it).
    Mirror(Arc<OpenMirror>),
    /// The node keeps none (or predates them).
    None,
    /// The node named one that cannot be used.
    Refused(MirrorError),
    /// Asking failed otherwise (the node is gone, say).
    Failed(DevError),
}

/// The device's mirror, asked for on demand and mapped once.
#[derive(Debug)]
pub struct DeviceMirror {
    dev: Arc<DevNode>,
    open: Mutex<Option<Arc<OpenMirror>>>,
}

impl DeviceMirror {
    /// The mirror of `dev`'s device (nothing is asked yet).
    pub fn new(dev: Arc<DevNode>) -> DeviceMirror {
        DeviceMirror {
            dev,
            open: Mutex::new(None),
        }
    }

    /// Asks the node for its mirror; the mapping already open when the
    /// node still names it, else the newly opened one (which replaces it
    /// for later askers; earlier ones keep theirs until they ask again).
    pub fn offer(&self) -> Offer {
        let info = match self.dev.mirror_info() {
            Ok(info) => info,
            Err(DevError::Ioctl {
                source: Errno::ENOTTY | Errno::ENODEV | Errno::EOPNOTSUPP,
                ..
            }) => return Offer::None,
            Err(e) => return Offer::Failed(e),
        };
        let path = MirrorInfo::path_of(&info.path).unwrap_or_default().to_vec();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = open.as_ref() {
            if m.path == path && m.reader.generation() == info.generation {
                return Offer::Mirror(Arc::clone(m));
            }
        }
        match MirrorReader::open(&info) {
            Ok(reader) => {
                let m = Arc::new(OpenMirror { reader, path });
                *open = Some(Arc::clone(&m));
                Offer::Mirror(m)
            }
            Err(e) => Offer::Refused(e),
        }
    }
}
