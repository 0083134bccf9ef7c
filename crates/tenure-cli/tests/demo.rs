//! `tenure demo` runs to completion: every kind of hand-over happens, and
//! the candidates' own reports show no two terms valid at once.

mod common;

use common::*;

#[test]
fn demo_runs_every_kind_of_hand_over_without_overlap() {
    let out =
        run_to_end(tenure().args(["demo", "--candidates", "3", "--duration", "20s", "--json"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["ok"], true, "{v:#}\n{stderr}");
    assert_eq!(v["overlaps"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert_eq!(v["tokens_rise"], true);
    let handovers = v["handovers"].as_array().expect("handovers");
    for kind in ["graceful", "crash", "pause"] {
        let h = handovers
            .iter()
            .find(|h| h["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} hand-over: {v:#}"));
        assert!(h["to_token"].as_u64() > h["from_token"].as_u64(), "{h}");
        assert!(h["failover_ms"].as_f64().is_some() && h["bound_ms"].as_f64().is_some());
    }
    // Every term in order of election has a higher token than the last.
    let tokens: Vec<u64> = v["terms"]
        .as_array()
        .expect("terms")
        .iter()
        .filter_map(|t| t["token"].as_u64())
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // The live timeline went to stderr.
    assert!(stderr.contains("LEADS with token"), "{stderr}");
}
