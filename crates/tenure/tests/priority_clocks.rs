//! Preemption with a wall clock that stands still, on tokio's paused clock
//! through the public API: renewals are told by the holder's writes, not
//! by the record's times.

use std::sync::Arc;
use std::time::Duration;

use tenure::clock::Sleep;
use tenure::{
    Clock, Elector, GroupName, LeaseView, MemoryStore, MonoTime, Now, TokioClock, WallTime,
};

const TERM: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(15);

/// Tokio's paused clock whose wall time stands still (a host whose clock
/// is stuck): the monotonic clock, and so every timing rule, runs.
struct StuckWall {
    inner: Arc<TokioClock>,
    wall: WallTime,
}

impl Clock for StuckWall {
    fn now(&self) -> Now {
        Now {
            mono: self.inner.now().mono,
            wall: self.wall,
        }
    }
    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        self.inner.sleep_until(deadline)
    }
}

async fn holder(store: &MemoryStore) -> Option<String> {
    let v = store
        .read(&GroupName::new("jobs").unwrap())
        .await
        .unwrap()?;
    v.record.holder_id().map(str::to_owned)
}

/// Was a bug (liveness, regression against the old preemption task, which
/// compared versions). A leader of priority 1 whose wall clock stands still
/// renews every third of its term (new versions, same times); a candidate of
/// priority 9 never asks it, because the machine's look takes only a change
/// of the record's times for a renewal. Control: the same leader on a
/// running wall clock is preempted within DELAY + 3 terms.
#[tokio::test(start_paused = true)]
async fn a_leader_with_a_stuck_wall_clock_is_still_preempted() {
    for stuck in [false, true] {
        let clock = Arc::new(TokioClock::new());
        let store = MemoryStore::new();
        let leader_clock: Arc<dyn Clock> = if stuck {
            Arc::new(StuckWall {
                inner: clock.clone(),
                wall: clock.now().wall,
            })
        } else {
            clock.clone()
        };
        let low = Elector::builder(store.clone(), "jobs")
            .candidate_id("low")
            .term(TERM)
            .priority(1)
            .preempt_after(DELAY)
            .clock(leader_clock)
            .start()
            .unwrap();
        low.wait_for_leadership().await.unwrap();
        let high = Elector::builder(store.clone(), "jobs")
            .candidate_id("high")
            .term(TERM)
            .priority(9)
            .preempt_after(DELAY)
            .clock(clock.clone())
            .start()
            .unwrap();
        let led = tokio::time::timeout(DELAY + TERM * 3, high.wait_for_leadership()).await;
        let who = holder(&store).await;
        low.shutdown().await;
        high.shutdown().await;
        assert!(
            led.is_ok(),
            "stuck wall clock: {stuck}: the priority-9 candidate never led; holder {who:?}"
        );
    }
}
