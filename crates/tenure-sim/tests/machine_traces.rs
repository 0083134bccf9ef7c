//! The behaviour baseline for code moves: the machine tier's traces for a
//! fixed set of flags and seeds hash to the lines of
//! `scripts/machine-traces.baseline`. A change that only moves code (the
//! machine's handlers into rooms, the engine's concerns into types) must
//! keep every line; a change that means to alter behaviour updates the file
//! in the same commit, and says why.
//!
//! Each line is `FLAGS seed N HASH`: the simulator's flags (`default` for
//! none), the seed, and the first 16 hex digits of the SHA-256 of what
//! `tenure-sim --seed N --trace FLAGS` prints, its wall-time line left out
//! (the only line that differs between runs).

use std::process::Command;

use sha2::{Digest, Sha256};

const BASELINE: &str = include_str!("../../../scripts/machine-traces.baseline");

/// One baseline line: the flags, the seed and the expected hash.
fn parse(line: &str) -> (Vec<&str>, u64, &str) {
    let (flags, rest) = line
        .split_once(" seed ")
        .unwrap_or_else(|| panic!("baseline line without ' seed ': {line:?}"));
    let (seed, hash) = rest
        .split_once(' ')
        .unwrap_or_else(|| panic!("baseline line without a hash: {line:?}"));
    let flags = match flags {
        "default" => Vec::new(),
        flags => flags.split_whitespace().collect(),
    };
    let seed = seed
        .parse()
        .unwrap_or_else(|e| panic!("baseline seed {seed:?}: {e}"));
    (flags, seed, hash)
}

/// The hash of one run's printed trace, as the baseline keeps it.
fn trace_hash(flags: &[&str], seed: u64) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure-sim"))
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--trace")
        .args(flags)
        .output()
        .expect("tenure-sim runs");
    let mut printed = out.stdout;
    printed.extend_from_slice(&out.stderr);
    let text = String::from_utf8_lossy(&printed);
    let mut hasher = Sha256::new();
    for line in text.lines().filter(|l| !l.starts_with("wall time")) {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .fold(String::new(), |mut hex, b| {
            use std::fmt::Write as _;
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

#[test]
fn the_machine_tier_prints_the_baseline_traces() {
    let lines: Vec<&str> = BASELINE.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 40, "the baseline lost lines");
    let mut differ = Vec::new();
    for line in lines {
        let (flags, seed, expected) = parse(line);
        let got = trace_hash(&flags, seed);
        if got != expected {
            differ.push(format!("{line}: now {got}"));
        }
    }
    assert!(
        differ.is_empty(),
        "the machine tier's traces changed (a code move must not change behaviour; \
         a deliberate change updates scripts/machine-traces.baseline and says why):\n{}",
        differ.join("\n")
    );
}
