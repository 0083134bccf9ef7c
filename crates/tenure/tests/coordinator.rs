//! A coordinator drives the same elector handle as a lease store does.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::from_now;
use tenure::{Command, Coordinator, Elector, EndReason, Event, Role, Session, TokioClock};
use tokio::sync::mpsc;

/// Leadership given and taken by the test through a channel, as a consumer
/// group's assignment would be.
struct Scripted {
    assignments: mpsc::UnboundedReceiver<bool>,
    barrier_done: mpsc::UnboundedSender<()>,
}

#[async_trait]
impl Coordinator for Scripted {
    async fn run(mut self: Box<Self>, mut session: Session) {
        let mut token = 0;
        loop {
            tokio::select! {
                assigned = self.assignments.recv() => match assigned {
                    Some(true) => {
                        token += 10;
                        session.elected(token, from_now(&session, Duration::from_secs(60)));
                    }
                    Some(false) => {
                        let deadline = from_now(&session, Duration::from_secs(5));
                        session.end_term_and_drain(EndReason::Revoked, deadline).await;
                        let _ = self.barrier_done.send(());
                    }
                    None => return,
                },
                command = session.command() => match command {
                    Command::Resign => {
                        let now = session.clock().now().mono;
                        session.end_term(EndReason::Resigned, now);
                    }
                    Command::Shutdown => {
                        let deadline = from_now(&session, Duration::from_secs(5));
                        session.end_term_and_drain(EndReason::Shutdown, deadline).await;
                        return;
                    }
                },
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_drives_roles_events_work_and_the_barrier() {
    let (assign, assignments) = mpsc::unbounded_channel();
    let (barrier_done, mut barrier) = mpsc::unbounded_channel();
    let elector = Elector::with_coordinator(
        Scripted {
            assignments,
            barrier_done,
        },
        "kafka-group",
    )
    .candidate_id("a")
    .clock(Arc::new(TokioClock::new()))
    .start()
    .unwrap();
    let mut events = elector.events();

    assign.send(true).unwrap();
    let term = elector.wait_for_leadership().await.unwrap();
    assert_eq!(term.token(), 10);
    assert_eq!(events.next().await, Some(Event::Elected { token: 10 }));

    // Revocation waits for the work to drain: the barrier.
    let guard = term.hold();
    assign.send(false).unwrap();
    term.cancelled().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        barrier.try_recv().is_err(),
        "the rebalance waits while work is held"
    );
    drop(guard);
    barrier.recv().await.unwrap();
    assert_eq!(
        events.next().await,
        Some(Event::Ousted {
            token: 10,
            reason: EndReason::Revoked
        })
    );

    assign.send(true).unwrap();
    assert_eq!(elector.wait_for_leadership().await.unwrap().token(), 20);
    elector.shutdown().await;
    assert!(matches!(elector.role(), Role::Stopped));
}

/// A backend that finds it can never lead again reports a typed fault.
struct Failing;

#[async_trait]
impl Coordinator for Failing {
    async fn run(self: Box<Self>, mut session: Session) {
        session.elected(5, from_now(&session, Duration::from_secs(60)));
        let now = session.clock().now().mono;
        session.end_term(EndReason::Failed, now);
        session.fail(tenure::Fault::TokenRegressed {
            highest: 5,
            next: 1,
        });
    }
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_that_fails_reports_its_fault_to_the_handle() {
    let elector = Elector::with_coordinator(Failing, "kafka-group")
        .candidate_id("a")
        .clock(Arc::new(TokioClock::new()))
        .start()
        .unwrap();
    let err = elector.wait_for_leadership().await.unwrap_err();
    let fault = tenure::Fault::TokenRegressed {
        highest: 5,
        next: 1,
    };
    assert!(
        matches!(&err, tenure::ElectorError::Failed(f) if *f == fault),
        "{err:?}"
    );
    assert_eq!(elector.fault(), Some(&fault));
    let message = fault.to_string();
    assert!(
        message.contains("went backwards") && message.contains("fresh name"),
        "{message}"
    );
}
