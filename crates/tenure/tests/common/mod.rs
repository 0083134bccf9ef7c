//! What the tests of hand-written coordinators share.

use std::time::Duration;

use tenure::{MonoTime, Session};

/// The instant `after` from now on the session's clock: the deadline a
/// scripted coordinator hands out with a term, or gives its drain.
pub fn from_now(session: &Session, after: Duration) -> MonoTime {
    session.clock().now().mono + after
}
