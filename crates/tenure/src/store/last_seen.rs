//! What a store handle last saw of each group, for stores whose
//! conditional write must name more than tenure's [`Version`](crate::Version)
//! (an object's ETag, a node's data version): remembered on every read and
//! write, so that a compare-and-swap on a version the handle saw needs no
//! read first.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::record::GroupName;

/// The last `S` a store handle saw of each group; the handle's clones
/// share it (keep it in their shared state). A panic while the map was
/// held leaves it as it was: every entry is one whole `S`.
///
/// ```
/// use tenure::store::LastSeen;
/// use tenure::GroupName;
/// let seen = LastSeen::default();
/// let jobs = GroupName::new("jobs").unwrap();
/// assert_eq!(seen.recall(&jobs), None);
/// seen.remember(&jobs, Some("etag-1"));
/// assert_eq!(seen.recall(&jobs), Some("etag-1"));
/// seen.remember(&jobs, None);
/// assert_eq!(seen.recall(&jobs), None);
/// ```
#[derive(Debug)]
pub struct LastSeen<S> {
    by_group: Mutex<HashMap<GroupName, S>>,
}

impl<S> Default for LastSeen<S> {
    fn default() -> Self {
        LastSeen {
            by_group: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: Clone> LastSeen<S> {
    /// Remembers what the handle saw of `group` now, or, with `None`,
    /// forgets it (the handle no longer knows what is stored).
    pub fn remember(&self, group: &GroupName, seen: Option<S>) {
        let mut by_group = self.lock();
        match seen {
            Some(seen) => by_group.insert(group.clone(), seen),
            None => by_group.remove(group),
        };
    }

    /// What the handle last saw of `group`, if it remembers any.
    pub fn recall(&self, group: &GroupName) -> Option<S> {
        self.lock().get(group).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<GroupName, S>> {
        self.by_group.lock().unwrap_or_else(|p| p.into_inner())
    }
}
