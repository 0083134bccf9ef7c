//! Records tenure cannot read: a typed error, and never overwritten.

use super::*;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![
        case("corrupt_record_foreign", corrupt_foreign(h, r)),
        case("corrupt_record_too_new", corrupt_too_new(h, r)),
        case("corrupt_record_damaged", corrupt_damaged(h, r)),
        case(
            "elector_never_overwrites_undecodable",
            elector_never_overwrites_undecodable(h, r),
        ),
    ]
}

/// Plants `bytes` and checks that reads fail with the expected kind, that
/// CAS(None) still conflicts (a record exists), and that the bytes are
/// untouched.
pub(super) async fn undecodable<H: Harness>(
    h: &H,
    g: &GroupName,
    bytes: &[u8],
    kind: &str,
    is_kind: fn(&RecordError) -> bool,
) -> Result<(), String> {
    h.plant_raw(g, bytes).await;
    let s = h.store().await;
    for attempt in ["first read", "second read"] {
        match s.read(g).await {
            Err(StoreError::Record { group, source }) => {
                ensure!(
                    &group == g,
                    "{attempt}: the record error names group {:?}, expected {:?}",
                    group.as_str(),
                    g.as_str()
                );
                ensure!(
                    is_kind(&source),
                    "{attempt}: read returned RecordError {source:?}, expected RecordError::{kind}"
                );
            }
            Err(other) => {
                return Err(format!(
                    "{attempt}: read returned {}, expected StoreError::Record(RecordError::{kind})",
                    chain(&other)
                ))
            }
            Ok(v) => {
                return Err(format!(
                    "{attempt}: read of planted bytes {:?} returned {v:?}, expected StoreError::Record(RecordError::{kind})",
                    String::from_utf8_lossy(bytes)
                ))
            }
        }
    }
    write_conflicts(
        &s,
        g,
        None,
        &held_by("a", 1),
        "CAS(None) over an undecodable record",
    )
    .await?;
    let raw = h.read_raw(g).await;
    ensure!(
        raw.as_deref() == Some(bytes),
        "the planted bytes changed: planted {:?}, now {:?}",
        String::from_utf8_lossy(bytes),
        raw.as_deref().map(String::from_utf8_lossy)
    );
    Ok(())
}

/// Garbage, and JSON that is not a tenure record, read as `Foreign`.
async fn corrupt_foreign<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let cases: [(&str, &[u8]); 4] = [
        ("garbage", b"\x00\xff\xfenot a tenure record\x80"),
        ("empty", b""),
        ("other-json", br#"{"owner":"someone else","ttl":30}"#),
        ("text", b"locked by cron since 2019"),
    ];
    for (label, bytes) in cases {
        let g = run.group(&format!("foreign-{label}"))?;
        undecodable(h, &g, bytes, "Foreign", |e| {
            matches!(e, RecordError::Foreign { .. })
        })
        .await
        .map_err(|e| format!("{label}: {e}"))?;
    }
    Ok(Verdict::Pass)
}

/// A record from a newer format reads as `TooNew`.
async fn corrupt_too_new<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("too-new")?;
    undecodable(h, &g, br#"{"v":99}"#, "TooNew { found: 99 }", |e| {
        matches!(e, RecordError::TooNew { found: 99, .. })
    })
    .await?;
    Ok(Verdict::Pass)
}

/// A tenure record with contradicting fields reads as `Corrupt`.
async fn corrupt_damaged<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("damaged")?;
    let bytes = br#"{"v":1,"holder":{"id":"a","incarnation":1},"token":0,"term_ms":10000,"renewed_at_ms":0,"expires_at_ms":10000}"#;
    undecodable(h, &g, bytes, "Corrupt", |e| {
        matches!(e, RecordError::Corrupt { .. })
    })
    .await?;
    Ok(Verdict::Pass)
}

/// Drives the election [`Machine`] against a store handle, with simulated
/// monotonic time, carrying out every read and compare-and-swap it asks
/// for. Returns the outcome of each compare-and-swap it attempted.
pub(super) async fn drive_machine<S: LeaseStore>(
    machine: &mut Machine,
    store: &S,
    g: &GroupName,
    clock: &mut u64,
    step: Duration,
    steps: usize,
) -> Vec<(Option<Version>, Result<CasOutcome, String>)> {
    let mut cas = Vec::new();
    let mut inputs = VecDeque::new();
    for _ in 0..steps {
        let input = match inputs.pop_front() {
            Some(input) => input,
            None => {
                *clock += u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
                Input::Tick
            }
        };
        let now = Now {
            mono: MonoTime::from_nanos(*clock),
            wall: WallTime::now(),
        };
        for action in machine.step(now, input) {
            match action {
                Action::Read { op, .. } => {
                    let result = store.read(g).await;
                    inputs.push_back(Input::ReadDone { op, result });
                }
                Action::Cas {
                    op,
                    expected,
                    record,
                    ..
                } => {
                    let result = store.compare_and_swap(g, expected, &record).await;
                    cas.push((expected, result.as_ref().map(|o| *o).map_err(|e| chain(e))));
                    inputs.push_back(Input::CasDone { op, result });
                }
                _ => {}
            }
        }
    }
    cas
}

/// What the elector does with an undecodable record: it never writes over
/// it. A candidate that never decoded the record never writes at all; one
/// that saw an older, valid record may try its stale version, which the
/// store must refuse because planting the bytes changed the version.
async fn elector_never_overwrites_undecodable<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let timing = Config::new(Duration::from_secs(10))
        .validate()
        .map_err(|e| format!("test bug: {e}"))?;
    let step = timing.term; // every tick passes a whole term
    let me = Holder {
        id: "testkit-candidate".into(),
        incarnation: rand::random(),
    };
    let garbage: &[u8] = b"\x00\xffnot a tenure record";
    let s = h.store().await;

    // A: the record was undecodable from the start.
    let g = run.group("elector-foreign")?;
    h.plant_raw(&g, garbage).await;
    let start = Now {
        mono: MonoTime::from_nanos(1),
        wall: WallTime::now(),
    };
    let mut clock = 1;
    let mut m = Machine::new(timing.clone(), me.clone(), Metadata::new(), 1, start);
    let cas = drive_machine(&mut m, &s, &g, &mut clock, step, 40).await;
    ensure!(
        cas.is_empty(),
        "a candidate that could never decode the record attempted compare-and-swaps {cas:?}"
    );
    let raw = h.read_raw(&g).await;
    ensure!(
        raw.as_deref() == Some(garbage),
        "the undecodable record changed under a candidate: now {:?}",
        raw.as_deref().map(String::from_utf8_lossy)
    );

    // B: the candidate saw a valid record held by another, then the record
    // became undecodable before the holder's term ran out.
    let g = run.group("elector-went-bad")?;
    write_applies(
        &s,
        &g,
        None,
        &held_by("other", 5),
        "write of the other holder's record",
    )
    .await?;
    let mut clock = 1;
    let mut m = Machine::new(timing, me, Metadata::new(), 2, start);
    let first = drive_machine(&mut m, &s, &g, &mut clock, Duration::ZERO, 4).await;
    ensure!(
        first.is_empty(),
        "the candidate wrote over a live lease before its term ran out: {first:?}"
    );
    h.plant_raw(&g, garbage).await;
    let cas = drive_machine(&mut m, &s, &g, &mut clock, step, 40).await;
    let applied_over: Vec<_> = cas
        .iter()
        .filter(|(_, r)| !matches!(r, Ok(CasOutcome::Conflict)))
        .collect();
    ensure!(
        applied_over.is_empty(),
        "compare-and-swaps with a version read before the record went bad were not refused: \
         {applied_over:?} (plant_raw must change the version, and the store must compare it)"
    );
    let raw = h.read_raw(&g).await;
    ensure!(
        raw.as_deref() == Some(garbage),
        "the undecodable record changed under a candidate: now {:?}",
        raw.as_deref().map(String::from_utf8_lossy)
    );
    Ok(Verdict::Pass)
}
