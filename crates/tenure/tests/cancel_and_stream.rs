//! The tokio-ecosystem habits (issue 43): an elector that shuts down on the
//! application's `CancellationToken`, and its events as a `Stream`. On the
//! memory store under tokio's paused clock: exact, no scheduling luck.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tenure::{Elector, Event, MemoryStore, Role, TokioClock};
use tokio_util::sync::CancellationToken;

const TERM: Duration = Duration::from_secs(10);

fn candidate(store: &MemoryStore, id: &str, cancel: Option<CancellationToken>) -> Elector {
    let mut builder = Elector::builder(store.clone(), "jobs")
        .candidate_id(id)
        .term(TERM)
        .clock(Arc::new(TokioClock::new()));
    if let Some(token) = cancel {
        builder = builder.cancel_on(token);
    }
    builder.start().expect("valid config")
}

/// Cancelling the token shuts the leader down the way `shutdown` does: the
/// lease is released, so the follower leads at once, not a term later.
#[tokio::test(start_paused = true)]
async fn a_cancelled_token_shuts_the_elector_down_and_hands_over() {
    let store = MemoryStore::new();
    let shutdown = CancellationToken::new();
    let a = candidate(&store, "a", Some(shutdown.clone()));
    a.wait_for_leadership().await.unwrap();
    let b = candidate(&store, "b", None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.role().is_leader());

    let began = tokio::time::Instant::now();
    shutdown.cancel();
    let term = b.wait_for_leadership().await.unwrap();
    assert_eq!(term.token(), 2);
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "released, not expired: {:?}",
        began.elapsed()
    );
    assert_eq!(a.role(), Role::Stopped);
    b.shutdown().await;
}

/// A token never cancelled keeps nothing alive: the elector stops as usual
/// and the token's task ends with it.
#[tokio::test(start_paused = true)]
async fn an_uncancelled_token_does_not_hold_the_elector() {
    let store = MemoryStore::new();
    let token = CancellationToken::new();
    let a = candidate(&store, "a", Some(token.clone()));
    a.wait_for_leadership().await.unwrap();
    a.shutdown().await;
    assert_eq!(a.role(), Role::Stopped);
    // Cancelling afterwards is harmless.
    token.cancel();
    tokio::task::yield_now().await;
    assert_eq!(a.role(), Role::Stopped);
}

/// The events through `StreamExt`: elected, then ousted on shutdown, then
/// the end of the stream once the elector stopped.
#[tokio::test(start_paused = true)]
async fn events_are_a_stream() {
    let store = MemoryStore::new();
    let a = candidate(&store, "a", None);
    let events = a.events();
    a.wait_for_leadership().await.unwrap();
    a.shutdown().await;
    drop(a);
    let seen: Vec<Event> = tokio::time::timeout(Duration::from_secs(60), events.collect())
        .await
        .expect("the stream ends once the elector is gone");
    assert!(
        matches!(seen.first(), Some(Event::Elected { token: 1 })),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::Ousted { token: 1, .. })),
        "{seen:?}"
    );
}
