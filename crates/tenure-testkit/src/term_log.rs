//! A record of every term some electors held, in real time, to check that
//! no two overlap and that tokens rise: the safety invariant, observed from
//! outside, on real servers and in the simulation's elector tier.
//!
//! Instants are [`tokio::time::Instant`]s: the host's monotonic clock in an
//! ordinary runtime, and tokio's clock in a test whose time is paused, so
//! the same log serves both.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use tenure::Elector;
use tenure::Role;

/// One term as seen from outside.
#[derive(Clone, Debug)]
pub struct TermSpan {
    /// Who held it.
    pub candidate: String,
    /// Its fencing token.
    pub token: u64,
    /// When it began: its elector announced it ([`TermLog::watch`]), or its
    /// work started ([`TermLog::open`]).
    pub elected: Instant,
    /// When it ended: its work had to be gone ([`Term::ended`](tenure::Term::ended)),
    /// or its work stopped ([`TermLog::open`]); `None` while it lasts.
    pub ended: Option<Instant>,
}

/// A broken invariant among the spans of a [`TermLog`].
#[derive(Clone, Debug)]
pub enum TermProblem {
    /// Two spans overlap in time.
    Overlap {
        /// The span that began first.
        first: TermSpan,
        /// The span that began while `first` lasted.
        second: TermSpan,
    },
    /// A span began with a lower token than an earlier one, or with the
    /// same token but another candidate.
    TokenOrder {
        /// The earlier span.
        earlier: TermSpan,
        /// The later span.
        later: TermSpan,
    },
}

impl fmt::Display for TermProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TermProblem::Overlap { first, second } => write!(
                f,
                "terms overlap: {} (token {}) and {} (token {})",
                first.candidate, first.token, second.candidate, second.token
            ),
            TermProblem::TokenOrder { earlier, later } => write!(
                f,
                "tokens did not rise: {} (token {}) began after {} (token {})",
                later.candidate, later.token, earlier.candidate, earlier.token
            ),
        }
    }
}

/// Watches electors' roles, or the work of their terms, and records each
/// term's span.
#[derive(Clone, Debug, Default)]
pub struct TermLog {
    spans: Arc<Mutex<Vec<TermSpan>>>,
}

/// Keeps a span of a [`TermLog`] open; dropping it ends the span. See
/// [`TermLog::open`].
#[derive(Debug)]
pub struct SpanGuard {
    spans: Arc<Mutex<Vec<TermSpan>>>,
    index: usize,
    /// Where the span ends, if not when the guard is dropped.
    end: Option<Instant>,
}

impl SpanGuard {
    /// Ends the span at `at` (never before it began) instead of now: for
    /// work whose process was frozen (paused, or stopped with SIGSTOP)
    /// from `at` until the work was dropped, and so did nothing after `at`.
    pub fn end_at(mut self, at: Instant) {
        self.end = Some(at);
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        let end = self.end.unwrap_or_else(Instant::now);
        if let Some(span) = lock(&self.spans).get_mut(self.index) {
            span.ended = Some(end.max(span.elected));
        }
    }
}

fn lock(spans: &Mutex<Vec<TermSpan>>) -> MutexGuard<'_, Vec<TermSpan>> {
    spans.lock().unwrap_or_else(|p| p.into_inner())
}

impl TermLog {
    /// Starts watching `electors` (from their current role on).
    pub fn watch(electors: &[&Elector]) -> TermLog {
        let log = TermLog::default();
        for e in electors {
            log.add(e);
        }
        log
    }

    /// Watches one more elector, from its current role on: a term's span
    /// runs from its announcement to [`Term::ended`](tenure::Term::ended).
    /// Must be called within a tokio runtime.
    pub fn add(&self, elector: &Elector) {
        let mut rx = elector.watch_role();
        let candidate = elector.candidate_id().to_owned();
        let log = self.clone();
        tokio::spawn(async move {
            loop {
                let role = rx.borrow_and_update().clone();
                if let Role::Leader(term) = role {
                    let guard = log.open(candidate.clone(), term.token());
                    tokio::spawn(async move {
                        term.ended().await;
                        drop(guard);
                    });
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Opens a span now, for work that runs under a term: the span ends
    /// when the returned guard is dropped, so a guard kept inside the work's
    /// future records exactly when the work stopped (returned, or was
    /// dropped).
    pub fn open(&self, candidate: impl Into<String>, token: u64) -> SpanGuard {
        let mut spans = lock(&self.spans);
        spans.push(TermSpan {
            candidate: candidate.into(),
            token,
            elected: Instant::now(),
            ended: None,
        });
        SpanGuard {
            spans: self.spans.clone(),
            index: spans.len() - 1,
            end: None,
        }
    }

    /// The spans so far, in the order they began.
    pub fn spans(&self) -> Vec<TermSpan> {
        lock(&self.spans).clone()
    }

    /// Every broken invariant so far: spans that overlap (a span still open
    /// lasts until now; one ending exactly when another begins does not
    /// overlap it), and tokens that did not rise in the order spans began.
    /// The same token may begin again only for the same candidate: its
    /// term's work can be run again.
    pub fn problems(&self) -> Vec<TermProblem> {
        let spans = self.spans();
        let now = Instant::now();
        let mut problems = Vec::new();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let a_end = a.ended.unwrap_or(now);
                let b_end = b.ended.unwrap_or(now);
                if !(a_end <= b.elected || b_end <= a.elected) {
                    problems.push(TermProblem::Overlap {
                        first: a.clone(),
                        second: b.clone(),
                    });
                }
            }
        }
        for w in spans.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if b.token < a.token || (b.token == a.token && b.candidate != a.candidate) {
                problems.push(TermProblem::TokenOrder {
                    earlier: a.clone(),
                    later: b.clone(),
                });
            }
        }
        problems
    }

    /// Panics, naming the terms, if two spans overlap or tokens did not rise
    /// (see [`problems`](TermLog::problems)); returns the spans otherwise.
    pub fn check(&self) -> Vec<TermSpan> {
        let problems = self.problems();
        assert!(
            problems.is_empty(),
            "{}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        self.spans()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn spans_follow_the_paused_clock_and_overlaps_are_found() {
        let log = TermLog::default();
        let a = log.open("a", 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(a);
        // Beginning exactly when the last one ended is no overlap.
        let b = log.open("b", 2);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(log.problems().is_empty(), "{:?}", log.problems());
        let spans = log.spans();
        assert_eq!(
            spans[0].ended.unwrap() - spans[0].elected,
            Duration::from_secs(2),
            "paused time, not the host's"
        );
        let c = log.open("c", 3);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let problems = log.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .to_string()
                .contains("b (token 2) and c (token 3)"),
            "{}",
            problems[0]
        );
        drop((b, c));
    }

    #[tokio::test(start_paused = true)]
    async fn a_span_can_end_where_its_process_froze() {
        let log = TermLog::default();
        let start = Instant::now();
        let a = log.open("a", 1);
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Frozen from 2 s on, dropped at 5 s: it ends at 2 s, so a term
        // that begins now does not overlap it.
        a.end_at(start + Duration::from_secs(2));
        let b = log.open("b", 2);
        drop(b);
        assert!(log.problems().is_empty(), "{:?}", log.problems());
        assert_eq!(log.spans()[0].ended, Some(start + Duration::from_secs(2)));
        // Never before it began.
        let c = log.open("c", 3);
        c.end_at(start);
        assert_eq!(log.spans()[2].ended, Some(log.spans()[2].elected));
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_must_rise_except_for_the_same_candidates_term_run_again() {
        let log = TermLog::default();
        drop(log.open("a", 4));
        drop(log.open("a", 4));
        assert!(log.problems().is_empty());
        drop(log.open("b", 4));
        drop(log.open("b", 3));
        let problems: Vec<String> = log.problems().iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("b (token 4) began after a (token 4)"));
        assert!(problems[1].contains("b (token 3) began after b (token 4)"));
    }
}
