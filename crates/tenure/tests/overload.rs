//! Many groups on a store past its capacity, on tokio's paused clock: a
//! store of one server that takes 1 ms an operation (1,000 a second)
//! against groups whose renewals alone would ask for more. The engine must
//! hold what the store can serve and keep it, not thrash.

use std::sync::Arc;
use std::time::Duration;

use tenure::{Config, Elector, Engine, MemoryStore, TokioClock};
use tenure_testkit::ServiceTimeStore;

const TERM: Duration = Duration::from_secs(2);
const PER_OP: Duration = Duration::from_millis(1);

/// How many groups the store could renew at all: one renewal per renew
/// interval (a third of the term) each, at 1 ms an operation.
fn capacity() -> usize {
    (TERM.as_millis() / 3 / PER_OP.as_millis()) as usize
}

fn start(
    store: &ServiceTimeStore<MemoryStore>,
    clock: &Arc<TokioClock>,
    groups: usize,
) -> Vec<Elector> {
    let engine = Engine::builder(store.clone())
        .clock(clock.clone())
        .start()
        .expect("in a runtime");
    (0..groups)
        .map(|g| {
            engine
                .elector(format!("overload-{g}"))
                .candidate_id("a")
                .config(Config::new(TERM))
                .start()
                .expect("valid config")
        })
        .collect()
}

fn leaders(electors: &[Elector]) -> usize {
    electors.iter().filter(|e| e.is_leader()).count()
}

/// Samples how many groups lead every 100 ms for `terms` terms.
async fn series(electors: &[Elector], terms: u32) -> Vec<usize> {
    let mut out = Vec::new();
    for _ in 0..terms * 20 {
        tokio::time::sleep(TERM / 20).await;
        out.push(leaders(electors));
    }
    out
}

/// How many terms that were held at one sample (every 100 ms) were gone
/// at the next, over `terms` terms.
async fn terms_lost(electors: &[Elector], terms: u32) -> usize {
    let tokens = || -> Vec<Option<u64>> {
        electors
            .iter()
            .map(|e| e.current_term().filter(|t| t.is_valid()).map(|t| t.token()))
            .collect()
    };
    let mut before = tokens();
    let mut lost = 0;
    for _ in 0..terms * 20 {
        tokio::time::sleep(TERM / 20).await;
        let now = tokens();
        lost += before
            .iter()
            .zip(&now)
            .filter(|(b, n)| b.is_some() && b != n)
            .count();
        before = now;
    }
    lost
}

/// Twice as many groups as the store can renew, all starting at once, and
/// then the store twice as slow for two terms: the engine settles on a
/// plateau of at least 80 % of what the store can renew (measured 101-113 %
/// in six runs), keeps what the slowed store can renew while it is slow
/// instead of losing everything (measured 360-391 of the 333 it can), comes
/// back to at least 80 % of its plateau within 3 terms (measured 92-97 %)
/// and stays there, and once settled it does not keep losing and retaking
/// terms (measured: at most one lost in 5 terms).
#[tokio::test(start_paused = true)]
async fn at_twice_its_capacity_the_engine_holds_a_plateau_and_comes_back_to_it() {
    holds_a_plateau(2).await;
}

/// The same at five times the capacity (measured in six runs: plateau
/// 92-106 % of capacity, 362-404 held while slowed, 94-106 % of the
/// plateau after).
#[tokio::test(start_paused = true)]
async fn at_five_times_its_capacity_the_engine_holds_a_plateau_and_comes_back_to_it() {
    holds_a_plateau(5).await;
}

/// `times` the capacity in groups: the plateau must be at least 80 % of
/// the capacity, what is led while the store is twice as slow at least 80 %
/// of the half it can renew then, and what is led from 3 terms after the
/// slowdown at least 80 % of the plateau.
async fn holds_a_plateau(times: usize) {
    let (plateau_pct, after_pct) = (80, 80);
    let clock = Arc::new(TokioClock::new());
    let store = ServiceTimeStore::new(MemoryStore::new(), PER_OP);
    let groups = capacity() * times;
    let electors = start(&store, &clock, groups);
    let warm_up = series(&electors, 10).await;
    let settled = series(&electors, 10).await;
    let plateau = *settled.iter().min().unwrap();
    eprintln!(
        "capacity {}, groups {groups}: warm-up {:?}, settled min {plateau} max {}; {:?}",
        capacity(),
        &warm_up[warm_up.len() - 5..],
        settled.iter().max().unwrap(),
        electors[0].engine().map(|e| e.stats())
    );
    assert!(
        plateau * 100 >= capacity() * plateau_pct,
        "fewer than {plateau_pct} % of what the store can renew stay led: {plateau} of {}",
        capacity()
    );
    // The trigger: the store is twice as slow for two terms.
    store.set_per_op(PER_OP * 2);
    let slowed = series(&electors, 2).await;
    store.set_per_op(PER_OP);
    let back = series(&electors, 3).await;
    let after = series(&electors, 10).await;
    let churn = terms_lost(&electors, 5).await;
    let worst_after = *after.iter().min().unwrap();
    let worst_slowed = *slowed.iter().min().unwrap();
    eprintln!(
        "slowed {:?}, back {:?}, after min {worst_after}, terms lost over 5 steady terms {churn}",
        slowed.iter().min(),
        &back[back.len() - 5..]
    );
    assert!(
        worst_slowed * 100 >= capacity() / 2 * 80,
        "while the store was twice as slow the engine fell to {worst_slowed}, below 80 % of the {} it could renew",
        capacity() / 2
    );
    assert!(
        worst_after * 100 >= plateau * after_pct,
        "after the slowdown the engine fell to {worst_after}, below {after_pct} % of its plateau {plateau}"
    );
    // Settled, terms are mostly not lost: in 20 runs of both tests, 0 in
    // 14, 1 to 19 in 5, and once 163 of a plateau of about 680, a burst
    // when the held set, which overshoots the capacity (no budget of held
    // terms yet, see docs/benchmarks.md), is trimmed back. The bound is
    // then a tenth of the plateau per term on average: a thrashing engine
    // loses and retakes most of its groups every term. Without admission
    // the engine held none of the groups.
    assert!(
        churn * 2 <= plateau,
        "{churn} terms lost in 5 steady terms (plateau {plateau}): the engine keeps losing and retaking leases"
    );
}

/// A clock whose sleeps all end `late` after they were due: the engine's
/// task on a host whose CPU other processes take.
struct LateClock {
    inner: TokioClock,
    late: Duration,
}

impl tenure::Clock for LateClock {
    fn now(&self) -> tenure::Now {
        self.inner.now()
    }

    fn sleep_until(&self, deadline: tenure::MonoTime) -> tenure::clock::Sleep {
        self.inner.sleep_until(deadline + self.late)
    }
}

/// Waits (up to `within`) until every elector leads: how many do, and
/// after how long.
async fn wait_all(electors: &[Elector], within: Duration) -> (usize, Duration) {
    let began = tokio::time::Instant::now();
    let mut led = 0;
    while began.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(100)).await;
        led = leaders(electors);
        if led == electors.len() {
            break;
        }
    }
    (led, began.elapsed())
}

/// A busy host is not an overloaded store: every wake-up of the engine
/// comes 700 ms late, on a store that serves 20,000 operations a second.
/// 500 groups lead, renewing every 200 ms (a 10 s term: 2.5 s operation
/// timeout, and a renewal has 6.2 s between falling due and the last
/// instant it could still go out with its whole timeout, so 700 ms late is
/// no risk to them), so the engine wakes for a timer several times a
/// second, late each time. Then 4,000 more groups join: all are elected
/// within a term, no term is lost, and the admission window, which only
/// the store's replies may shrink, has grown past the 4,500 groups (the
/// slow start). Before, each late wake-up (past a quarter of the operation
/// timeout) dropped the window to its floor of 8 and paused acquisitions
/// for 625 ms: the run ended with a window of 688.
#[tokio::test(start_paused = true)]
async fn a_busy_host_that_wakes_the_engine_late_still_elects_at_the_rate_the_store_serves() {
    let term = Duration::from_secs(10);
    let config = Config {
        renew_interval: Some(Duration::from_millis(200)),
        ..Config::new(term)
    };
    let clock: Arc<dyn tenure::Clock> = Arc::new(LateClock {
        inner: TokioClock::new(),
        late: Duration::from_millis(700),
    });
    let store = ServiceTimeStore::new(MemoryStore::new(), Duration::from_micros(50));
    let engine = Engine::builder(store)
        .clock(clock)
        .start()
        .expect("in a runtime");
    let start = |range: std::ops::Range<usize>| -> Vec<Elector> {
        range
            .map(|g| {
                engine
                    .elector(format!("busy-{g}"))
                    .candidate_id("a")
                    .config(config.clone())
                    .start()
                    .expect("valid config")
            })
            .collect()
    };
    let mut electors = start(0..500);
    let (led, took) = wait_all(&electors, term * 10).await;
    assert_eq!(led, 500, "the first 500 after {took:?}");
    // The leaders renew, and the engine wakes late for it, for 2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    electors.extend(start(500..4_500));
    let (led, took) = wait_all(&electors, term * 10).await;
    let stats = engine.stats();
    eprintln!("{led} of 4500 led after {took:?}; {stats:?}");
    assert!(
        led == 4_500 && took <= term,
        "{led} of 4500 led after {took:?}: the engine's lateness was taken for the store's"
    );
    assert!(
        stats.admission_window >= 4_500,
        "the admission window shrank to {} with a store that never was slow",
        stats.admission_window
    );
    let lost = terms_lost(&electors, 5).await;
    assert_eq!(
        lost, 0,
        "terms lost on a busy host while the store keeps up"
    );
}
