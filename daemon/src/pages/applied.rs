//! What one refresh of the pages found, shared by the refresh itself and
//! the commit waiter that follows the pages it found moving (its own
//! module so that neither of the two depends on the other for it).

use super::table::Key;

/// What a refresh found.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// A VM block went backwards (a device reset).
    pub(super) reset: bool,
    /// Pages whose block moved (a newer commit).
    pub(super) moved: Vec<Key>,
}
