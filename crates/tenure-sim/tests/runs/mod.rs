//! Running seeds of any tier: all clean, or until a violation turns up.
#![allow(
    dead_code,
    unused_macros,
    unused_imports,
    reason = "every test binary compiles this module; not all of them use all of it"
)]

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use tenure_sim::{
    FaultCounts, FaultKind, Params, Tier, TierReport, TierSummary, Violation, ViolationKind,
};

/// Runs `seeds` of the tier with these parameters and fails naming every
/// violation with the command that replays its seed; otherwise returns the
/// runs' summary.
pub fn run_clean<T: Tier>(params: &Params<T>, seeds: Range<u64>) -> T::Summary {
    let mut summary = T::Summary::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let report = params.run(seed).unwrap();
        for v in &report.record().violations {
            failures.push(format!("{v}\n  replay: {}", params.replay_command(seed)));
        }
        summary.add(&report);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    summary
}

/// Tests that differ only in their seeds: for each `name: seeds`, a test
/// that runs `seeds` with `params` clean ([`run_clean`]) and hands the
/// summary to `check`. Many ranges rather than one let the test runner
/// spread them over cores.
macro_rules! clean_seed_ranges {
    ($params:expr, $check:expr; $($name:ident: $seeds:expr),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                let summary = runs::run_clean(&$params, $seeds);
                $check(&summary);
            }
        )+
    };
}
pub(crate) use clean_seed_ranges;

/// The first violation in `seeds` that `wanted` picks (it names its seed),
/// with the command that replays the seed.
pub fn first_violation<T: Tier>(
    params: &Params<T>,
    seeds: Range<u64>,
    wanted: impl Fn(&Violation) -> bool,
) -> Option<(Violation, String)> {
    for seed in seeds {
        let report = params.run(seed).unwrap();
        if let Some(v) = report.record().violations.iter().find(|v| wanted(v)) {
            assert_eq!(v.seed, seed);
            return Some((v.clone(), params.replay_command(seed)));
        }
    }
    None
}

/// The first overlap of two terms' work in `seeds` that `also` picks (it
/// names its seed, and the later term has the higher token), with a
/// message that names it and the command that replays its seed.
pub fn first_work_overlap<T: Tier>(
    params: &Params<T>,
    seeds: Range<u64>,
    also: impl Fn(&Violation) -> bool,
) -> Option<(Violation, String)> {
    let (v, replay) = first_violation(params, seeds, |v| {
        v.kind == ViolationKind::Overlap && v.detail.contains("work of two terms") && also(v)
    })?;
    assert_eq!(v.tokens.len(), 2, "{v}");
    assert!(v.tokens[0] < v.tokens[1], "{v}");
    let found = format!("{v}\n  replay: {replay}");
    Some((v, found))
}

/// Fails unless the runs that `summary` totals injected at least one fault
/// of every kind but those their tier has not (`not_in_tier`), by their
/// counts, `faults`.
pub fn assert_every_kind_injected(
    faults: &FaultCounts,
    not_in_tier: &[FaultKind],
    summary: &impl fmt::Display,
) {
    for kind in FaultKind::ALL {
        if !not_in_tier.contains(&kind) {
            assert!(faults[kind] > 0, "no {kind} injected:\n{summary}");
        }
    }
}

/// Fails unless, in the runs that `summary` totals, some term ended for each
/// of `reasons` (by their counts of ends, `ended`).
pub fn assert_ended(
    ended: &BTreeMap<&'static str, u64>,
    reasons: &[&str],
    summary: &impl fmt::Display,
) {
    for reason in reasons {
        assert!(
            ended.get(reason).is_some_and(|&n| n > 0),
            "no term ended as {reason}:\n{summary}"
        );
    }
}
