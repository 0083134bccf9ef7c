//! A record of every term some electors held, in real time, to check that
//! no two overlap and that tokens rise: the safety invariant, observed from
//! outside on real servers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::elector::Elector;
use crate::role::Role;

/// One term as seen from outside.
#[derive(Clone, Debug)]
pub struct TermSpan {
    /// Who held it.
    pub candidate: String,
    /// Its fencing token.
    pub token: u64,
    /// When its elector announced it.
    pub elected: Instant,
    /// When its work had to be gone ([`Term::ended`](crate::Term::ended)),
    /// if it has ended.
    pub ended: Option<Instant>,
}

/// Watches electors' roles and records each term's span.
#[derive(Clone, Debug, Default)]
pub struct TermLog {
    spans: Arc<Mutex<Vec<TermSpan>>>,
}

impl TermLog {
    /// Starts watching `electors` (from their current role on).
    pub fn watch(electors: &[&Elector]) -> TermLog {
        let log = TermLog::default();
        for e in electors {
            let mut rx = e.watch_role();
            let candidate = e.candidate_id().to_owned();
            let spans = log.spans.clone();
            tokio::spawn(async move {
                loop {
                    let role = rx.borrow_and_update().clone();
                    if let Role::Leader(term) = role {
                        let index = {
                            let mut s = spans.lock().unwrap_or_else(|p| p.into_inner());
                            s.push(TermSpan {
                                candidate: candidate.clone(),
                                token: term.token(),
                                elected: Instant::now(),
                                ended: None,
                            });
                            s.len() - 1
                        };
                        let spans = spans.clone();
                        tokio::spawn(async move {
                            term.ended().await;
                            let mut s = spans.lock().unwrap_or_else(|p| p.into_inner());
                            if let Some(span) = s.get_mut(index) {
                                span.ended = Some(Instant::now());
                            }
                        });
                    }
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            });
        }
        log
    }

    /// The spans so far, in order of election.
    pub fn spans(&self) -> Vec<TermSpan> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Panics, naming the terms, if two spans overlap or tokens did not rise
    /// in election order; returns the spans otherwise.
    pub fn check(&self) -> Vec<TermSpan> {
        let spans = self.spans();
        let now = Instant::now();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let a_end = a.ended.unwrap_or(now);
                let b_end = b.ended.unwrap_or(now);
                assert!(
                    a_end <= b.elected || b_end <= a.elected,
                    "terms overlap: {} (token {}) and {} (token {})",
                    a.candidate,
                    a.token,
                    b.candidate,
                    b.token
                );
            }
        }
        assert!(
            spans.windows(2).all(|w| w[0].token < w[1].token),
            "tokens did not rise: {:?}",
            spans.iter().map(|s| s.token).collect::<Vec<_>>()
        );
        spans
    }
}
