//! What the demo proves: every term's validity interval, the check that no
//! two overlap and that tokens strictly rise, and each hand-over measured
//! against the bound the configuration promised.
//!
//! A term's interval is `[elected, end]`, where `elected` is when its
//! candidate learned it leads (its work starts no earlier) and `end` is the
//! earlier of when its work stopped and its last known deadline. For a
//! candidate killed with SIGKILL the last deadline is known exactly only if
//! it cannot have sent another renewal before dying, which the orchestrator
//! arranges by striking right after a reported renewal; otherwise the end is
//! taken as `kill + leader validity`, the latest any renewal sent before the
//! kill could reach, so the check stays sound either way.

use std::time::Duration;

use serde::Serialize;
use tenure::{Bounds, Timing};

use crate::view;

/// How a leader was taken down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// SIGTERM: drain and release.
    Graceful,
    /// SIGKILL.
    Crash,
    /// SIGSTOP for longer than a term, then SIGCONT.
    Pause,
}

impl Kind {
    /// The word for tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Graceful => "graceful",
            Kind::Crash => "crash",
            Kind::Pause => "pause",
        }
    }
}

/// One term as reported by its candidate.
#[derive(Debug, Clone)]
pub struct TermLog {
    /// The fencing token.
    pub token: u64,
    /// Who led.
    pub candidate: String,
    /// When the candidate learned it leads.
    pub elected_at: u64,
    /// The last deadline it reported.
    pub deadline: u64,
    /// When its work stopped, if reported.
    pub ended_at: Option<u64>,
    /// Why the library ended the term, if reported.
    pub reason: Option<String>,
    /// When its process was killed with SIGKILL, if it was while leading.
    pub killed_at: Option<u64>,
}

/// One take-down and what followed.
#[derive(Debug, Clone)]
pub struct HandOver {
    /// How the leader was taken down (the row's kind of hand-over).
    pub kind: Kind,
    /// The leader's token.
    pub from_token: u64,
    /// When the signal was sent.
    pub signalled_at: u64,
    /// For a graceful stop: when the old leader's release was written.
    pub released_at: Option<u64>,
    /// The next term's token, once elected.
    pub to_token: Option<u64>,
}

/// A term's validity interval.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    /// The fencing token.
    pub token: u64,
    /// Who led.
    pub candidate: String,
    /// Start, nanoseconds on the shared clock.
    #[serde(skip)]
    pub start: u64,
    /// End, nanoseconds on the shared clock.
    #[serde(skip)]
    pub end: u64,
    /// Start, milliseconds since the demo began.
    pub start_ms: f64,
    /// End, milliseconds since the demo began.
    pub end_ms: f64,
    /// Whether the end is known exactly (see the module docs).
    pub exact: bool,
    /// How it ended.
    pub ended_by: String,
}

/// Two terms valid at once.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// The earlier term.
    pub first: u64,
    /// The later term.
    pub second: u64,
    /// How long both were valid, in milliseconds.
    pub overlap_ms: f64,
}

/// One row of the hand-over table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// How the leader was taken down.
    pub kind: Kind,
    /// The old leader.
    pub from: String,
    /// The old leader's token.
    pub from_token: u64,
    /// The new leader.
    pub to: String,
    /// The new leader's token, above the old one.
    pub to_token: u64,
    /// From the old term's end to the new term's start.
    pub leaderless_ms: f64,
    /// From the trigger (the release for a graceful stop, the signal
    /// otherwise) to the new term's start.
    pub failover_ms: f64,
    /// What the fail-over is measured from.
    pub measured_from: &'static str,
    /// The promised bound.
    pub bound_ms: f64,
    /// Whether the fail-over met it.
    pub within_bound: bool,
}

/// The promised bounds, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct BoundsJson {
    /// The configured term, the scale of every bound.
    pub term_ms: f64,
    /// A leader's validity per renewal.
    pub leader_validity_ms: f64,
    /// How long a challenger waits with the record unchanged.
    pub takeover_wait_ms: f64,
    /// Crash (or pause) to the next term.
    pub crash_failover_ms: f64,
    /// Release to the next term when polling; one store round trip with
    /// notifications.
    pub graceful_failover_polling_ms: f64,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// True when nothing overlapped, tokens rose, and every round ran.
    pub ok: bool,
    /// Candidates standing at a time.
    pub candidates: u8,
    /// The scratch database.
    pub store: String,
    /// Wall time the demo ran, in milliseconds.
    pub elapsed_ms: f64,
    /// What the configuration promised.
    pub bounds: BoundsJson,
    /// Each hand-over.
    pub handovers: Vec<Row>,
    /// Each term.
    pub terms: Vec<Interval>,
    /// Terms valid at the same time: must be empty.
    pub overlaps: Vec<Overlap>,
    /// Whether tokens strictly rose in election order.
    pub tokens_rise: bool,
    /// Everything that went wrong, in words.
    pub problems: Vec<String>,
}

/// Inputs of [`summarize`].
pub struct Facts<'a> {
    /// The timing in force.
    pub timing: &'a Timing,
    /// Every term reported.
    pub terms: &'a [TermLog],
    /// Every take-down.
    pub handovers: &'a [HandOver],
    /// Problems found while running.
    pub problems: Vec<String>,
    /// The demo's start on the shared clock.
    pub t0: u64,
    /// The demo's end on the shared clock.
    pub t_end: u64,
    /// Candidates standing at a time.
    pub candidates: u8,
    /// The store, for display.
    pub store: String,
}

/// Computes intervals, checks them and measures the hand-overs.
pub fn summarize(f: Facts<'_>) -> Summary {
    let bounds = f.timing.bounds();
    let ms = |ns: u64| ns.saturating_sub(f.t0) as f64 / 1e6;
    let mut terms: Vec<Interval> = f.terms.iter().map(|t| interval(t, f.timing, &ms)).collect();
    terms.sort_by_key(|i| (i.start, i.token));

    let mut problems = f.problems;
    let mut tokens_rise = true;
    for w in terms.windows(2) {
        if w[1].token <= w[0].token {
            tokens_rise = false;
            problems.push(format!(
                "tokens did not rise: token {} ({}) was elected after token {} ({})",
                w[1].token, w[1].candidate, w[0].token, w[0].candidate
            ));
        }
    }
    let mut overlaps = Vec::new();
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if a.end > b.start {
                let both = a.end.min(b.end).saturating_sub(b.start);
                overlaps.push(Overlap {
                    first: a.token,
                    second: b.token,
                    overlap_ms: both as f64 / 1e6,
                });
                problems.push(format!(
                    "OVERLAP: token {} ({}) was valid until {:.3}s but token {} ({}) started at {:.3}s{}",
                    a.token,
                    a.candidate,
                    a.end_ms / 1e3,
                    b.token,
                    b.candidate,
                    b.start_ms / 1e3,
                    if a.exact { "" } else { " (the first term's end is an upper bound)" }
                ));
            }
        }
    }

    let handovers = f
        .handovers
        .iter()
        .filter_map(|h| row(h, &terms, &bounds))
        .collect::<Vec<_>>();
    for kind in [Kind::Graceful, Kind::Crash, Kind::Pause] {
        if !handovers.iter().any(|r| r.kind == kind) {
            problems.push(format!("no {} hand-over was observed", kind.name()));
        }
    }
    Summary {
        ok: problems.is_empty(),
        candidates: f.candidates,
        store: f.store,
        elapsed_ms: ms(f.t_end),
        bounds: BoundsJson {
            term_ms: f.timing.term.as_secs_f64() * 1e3,
            leader_validity_ms: bounds.leader_validity.as_secs_f64() * 1e3,
            takeover_wait_ms: bounds.takeover_wait.as_secs_f64() * 1e3,
            crash_failover_ms: bounds.crash_failover.as_secs_f64() * 1e3,
            graceful_failover_polling_ms: bounds.graceful_failover_polling.as_secs_f64() * 1e3,
        },
        handovers,
        terms,
        overlaps,
        tokens_rise,
        problems,
    }
}

fn interval(t: &TermLog, timing: &Timing, ms: &dyn Fn(u64) -> f64) -> Interval {
    let validity = nanos(timing.leader_validity);
    let (mut end, mut exact) = (t.deadline, true);
    if let Some(stopped) = t.ended_at {
        end = end.min(stopped);
    } else if let Some(killed) = t.killed_at {
        // The last renewal reported was sent at `deadline - validity`; the
        // next would be sent a renew interval later. Killed before that, the
        // reported deadline is the last one the candidate ever had.
        let next_send = t
            .deadline
            .saturating_sub(validity)
            .saturating_add(nanos(timing.renew_interval));
        if killed >= next_send {
            exact = false;
            end = end.max(killed.saturating_add(validity));
        }
    }
    let ended_by = match (&t.reason, t.killed_at) {
        (_, Some(_)) if t.ended_at.is_none() => "killed (SIGKILL)".to_owned(),
        (Some(r), _) => r.clone(),
        (None, _) if t.ended_at.is_some() => "stopped".to_owned(),
        (None, _) => "deadline".to_owned(),
    };
    Interval {
        token: t.token,
        candidate: t.candidate.clone(),
        start: t.elected_at,
        end,
        start_ms: ms(t.elected_at),
        end_ms: ms(end),
        exact,
        ended_by,
    }
}

fn row(h: &HandOver, terms: &[Interval], bounds: &Bounds) -> Option<Row> {
    let to_token = h.to_token?;
    let from = terms.iter().find(|t| t.token == h.from_token)?;
    let to = terms.iter().find(|t| t.token == to_token)?;
    let (trigger, measured_from, bound) = match (h.kind, h.released_at) {
        (Kind::Graceful, Some(r)) => (r, "release", bounds.graceful_failover_polling),
        (Kind::Graceful, None) => (h.signalled_at, "SIGTERM", bounds.graceful_failover_polling),
        (Kind::Crash, _) => (h.signalled_at, "SIGKILL", bounds.crash_failover),
        (Kind::Pause, _) => (h.signalled_at, "SIGSTOP", bounds.crash_failover),
    };
    let failover = to.start.saturating_sub(trigger);
    let leaderless = to.start as f64 - from.end as f64;
    Some(Row {
        kind: h.kind,
        from: from.candidate.clone(),
        from_token: from.token,
        to: to.candidate.clone(),
        to_token: to.token,
        leaderless_ms: leaderless / 1e6,
        failover_ms: failover as f64 / 1e6,
        measured_from,
        bound_ms: bound.as_secs_f64() * 1e3,
        within_bound: failover <= nanos(bound),
    })
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The summary for people.
pub fn render(s: &Summary) -> String {
    let mut out = Vec::new();
    out.push(String::new());
    out.push("Hand-overs".to_owned());
    out.push(format!(
        "  {:<2} {:<9} {:<16} {:<8} {:>12}  {:<24} {:<14} {}",
        "#", "how", "from -> to", "tokens", "no leader", "fail-over", "promised", "met"
    ));
    for (i, r) in s.handovers.iter().enumerate() {
        out.push(format!(
            "  {:<2} {:<9} {:<16} {:<8} {:>12}  {:<24} {:<14} {}",
            i + 1,
            r.kind.name(),
            format!("{} -> {}", r.from, r.to),
            format!("{} -> {}", r.from_token, r.to_token),
            format!("{:.3}s", r.leaderless_ms / 1e3),
            format!("{:.3}s after {}", r.failover_ms / 1e3, r.measured_from),
            format!("<= {:.3}s", r.bound_ms / 1e3),
            if r.within_bound { "yes" } else { "NO" }
        ));
    }
    let b = &s.bounds;
    out.push(format!(
        "  promised by term {}: crash or pause <= {:.3}s (term x (1+drift)/(1-drift) + retry + jitter); \
         graceful <= {:.3}s polling, one store round trip with notifications",
        view::short(Duration::from_secs_f64(b.term_ms / 1e3)),
        b.crash_failover_ms / 1e3,
        b.graceful_failover_polling_ms / 1e3
    ));
    out.push(String::new());
    out.push("Terms (validity intervals, seconds since start)".to_owned());
    out.push(format!(
        "  {:>5}  {:<10} {:>9} {:>9}  {}",
        "token", "candidate", "from", "until", "ended by"
    ));
    for t in &s.terms {
        out.push(format!(
            "  {:>5}  {:<10} {:>9.3} {:>9.3}  {}{}",
            t.token,
            t.candidate,
            t.start_ms / 1e3,
            t.end_ms / 1e3,
            t.ended_by,
            if t.exact {
                ""
            } else {
                " (end is an upper bound)"
            }
        ));
    }
    out.push(String::new());
    if s.overlaps.is_empty() && s.tokens_rise {
        out.push(format!(
            "Overlap check: {} terms, tokens strictly rising, no two validity intervals overlap.",
            s.terms.len()
        ));
    }
    if !s.problems.is_empty() {
        out.push("!!! THE DEMO FOUND PROBLEMS !!!".to_owned());
        for p in &s.problems {
            out.push(format!("!!! {p}"));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::Config;

    const S: u64 = 1_000_000_000;

    fn timing() -> Timing {
        Config::new(Duration::from_secs(2)).validate().unwrap()
    }

    fn term(token: u64, start: u64, deadline: u64, ended: Option<u64>) -> TermLog {
        TermLog {
            token,
            candidate: format!("c{token}"),
            elected_at: start,
            deadline,
            ended_at: ended,
            reason: None,
            killed_at: None,
        }
    }

    fn facts<'a>(t: &'a Timing, terms: &'a [TermLog], h: &'a [HandOver]) -> Facts<'a> {
        Facts {
            timing: t,
            terms,
            handovers: h,
            problems: vec![],
            t0: 0,
            t_end: 100 * S,
            candidates: 3,
            store: "sqlite:///x".into(),
        }
    }

    #[test]
    fn disjoint_terms_pass_and_overlaps_are_found() {
        let t = timing();
        let ok = [
            term(1, S, 3 * S, Some(2 * S)),
            term(2, 2 * S + 1, 10 * S, None),
        ];
        let s = summarize(facts(&t, &ok, &[]));
        assert!(s.overlaps.is_empty() && s.tokens_rise);
        // Only the missing hand-over kinds are problems.
        assert_eq!(s.problems.len(), 3, "{:?}", s.problems);

        let bad = [term(1, S, 5 * S, None), term(2, 4 * S, 10 * S, None)];
        let s = summarize(facts(&t, &bad, &[]));
        assert_eq!(s.overlaps.len(), 1);
        assert!(!s.ok);

        let backwards = [term(2, S, 2 * S, None), term(1, 3 * S, 4 * S, None)];
        assert!(!summarize(facts(&t, &backwards, &[])).tokens_rise);
    }

    #[test]
    fn a_kill_long_after_the_last_renewal_widens_the_interval() {
        let t = timing();
        let mut killed = term(1, S, 3 * S, None);
        killed.killed_at = Some(S + S / 10);
        let i = interval(&killed, &t, &|n| n as f64);
        assert!(i.exact);
        assert_eq!(i.end, 3 * S);
        killed.killed_at = Some(5 * S);
        let i = interval(&killed, &t, &|n| n as f64);
        assert!(!i.exact);
        assert!(i.end > 5 * S);
    }

    #[test]
    fn hand_overs_are_measured_against_their_bound() {
        let t = timing();
        let terms = [
            term(1, S, 3 * S, Some(2 * S)),
            term(2, 2 * S + S / 10, 10 * S, None),
        ];
        let h = [HandOver {
            kind: Kind::Graceful,
            from_token: 1,
            signalled_at: 2 * S - 1000,
            released_at: Some(2 * S + 1000),
            to_token: Some(2),
        }];
        let s = summarize(facts(&t, &terms, &h));
        let r = &s.handovers[0];
        assert!(r.within_bound);
        assert!((r.leaderless_ms - 100.0).abs() < 0.01, "{r:?}");
        assert_eq!(r.measured_from, "release");
    }
}
