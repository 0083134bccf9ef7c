//! Many handles racing one compare-and-swap: exactly one wins, every round.

use super::*;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![
        case("concurrent_acquire", concurrent_acquire(h, r)),
        case("concurrent_takeover", concurrent_takeover(h, r)),
    ]
}

/// Runs `RACERS` compare-and-swaps at once, each on its own handle, after
/// a barrier; returns each racer's outcome.
pub(super) async fn race<H: Harness>(
    h: &H,
    g: &GroupName,
    expected: Option<Version>,
    token: u64,
) -> Result<Vec<(String, Result<CasOutcome, String>)>, String> {
    let mut handles = Vec::with_capacity(RACERS);
    for _ in 0..RACERS {
        handles.push(h.store().await);
    }
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::with_capacity(RACERS);
    for (i, store) in handles.into_iter().enumerate() {
        let barrier = barrier.clone();
        let g = g.clone();
        let id = format!("racer-{i}");
        let rec = held_by(&id, token);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = store
                .compare_and_swap(&g, expected, &rec)
                .await
                .map_err(|e| chain(&e));
            (id, r)
        }));
    }
    let mut results = Vec::with_capacity(RACERS);
    for task in tasks {
        results.push(
            task.await
                .map_err(|e| format!("a racer task failed: {e}"))?,
        );
    }
    Ok(results)
}

/// Exactly one of the racers applied; the read shows it. Returns the
/// winner's version.
pub(super) async fn one_winner<H: Harness>(
    h: &H,
    g: &GroupName,
    results: &[(String, Result<CasOutcome, String>)],
    token: u64,
    what: &str,
) -> Result<Version, String> {
    let errors: Vec<_> = results
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
        .collect();
    ensure!(
        errors.is_empty(),
        "{what}: {} of {RACERS} racers got an error instead of Applied or Conflict: {}",
        errors.len(),
        errors.join("; ")
    );
    let winners: Vec<_> = results
        .iter()
        .filter_map(|(id, r)| match r {
            Ok(CasOutcome::Applied(v)) => Some((id.clone(), *v)),
            _ => None,
        })
        .collect();
    ensure!(
        winners.len() == 1,
        "{what}: {} of {RACERS} racers got Applied, expected exactly one: {winners:?} \
         (the store's compare-and-swap is not atomic)",
        winners.len()
    );
    let (id, v) = &winners[0];
    let got = read_some(&h.store().await, g, &format!("{what}: read after the race")).await?;
    ensure!(
        got.record.holder_id() == Some(id.as_str())
            && got.record.token == token
            && got.version == *v,
        "{what}: {id} won at {v} with token {token}, but the read shows {:?} with token {} at {}",
        got.record.holder_id(),
        got.record.token,
        got.version
    );
    Ok(*v)
}

/// 16 handles race CAS(None) on an empty group: exactly one wins.
async fn concurrent_acquire<H: Harness>(h: &H, run: &Run) -> CaseResult {
    for round in 0..3 {
        let g = run.group(&format!("race-acquire-{round}"))?;
        let results = race(h, &g, None, 1).await?;
        one_winner(h, &g, &results, 1, &format!("round {round}")).await?;
    }
    Ok(Verdict::Pass)
}

/// 16 handles race to take over the same version: exactly one wins, round
/// after round.
async fn concurrent_takeover<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("race-takeover")?;
    let s = h.store().await;
    let mut version = write_applies(&s, &g, None, &held_by("first", 1), "initial acquire").await?;
    for round in 0..5u64 {
        let token = round + 2;
        let results = race(h, &g, Some(version), token).await?;
        version = one_winner(h, &g, &results, token, &format!("round {round}")).await?;
    }
    Ok(Verdict::Pass)
}
