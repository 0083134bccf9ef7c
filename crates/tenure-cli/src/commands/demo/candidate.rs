//! `tenure demo-candidate` (hidden): one candidate of the demo. It stands
//! for the group, and while leading does nothing but watch its term,
//! reporting every step as a [`Report`] line on stdout. SIGTERM makes it
//! shut down gracefully (drain, release); SIGKILL and SIGSTOP come from the
//! orchestrator to show crashes and pauses.

use std::time::Duration;

use tenure::{Elector, Event, EventStream, Term};

use super::report::{now, Report};
use crate::cli::DemoCandidateArgs;
use crate::exit::usage;
use crate::out;
use crate::signals::Stop;
use crate::store_url::StoreUrl;

/// How often the term's deadline is checked for renewals. The orchestrator
/// times its take-downs right after a reported renewal, so this only needs
/// to be much shorter than the renew interval.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// Runs one demo candidate until SIGTERM/SIGINT.
pub async fn run(args: DemoCandidateArgs) -> anyhow::Result<u8> {
    let url = StoreUrl::parse(&args.store).map_err(usage)?;
    let builder = builder(&url, &args).await?;
    let stop = Stop::listen()?;
    let elector = builder
        .candidate_id(args.id.clone())
        .term(args.term)
        .start()
        .map_err(usage)?;
    emit(&Report::Started {
        id: args.id.clone(),
        pid: std::process::id(),
        at: now(),
    });
    let mut events = elector.events();
    let reporter = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let Event::Ousted { token, reason } = event {
                emit(&Report::Ousted {
                    token,
                    at: now(),
                    reason: reason.to_string(),
                });
            }
        }
    });
    // A second subscription, read by `lead` for the reason its term ended.
    let mut reasons = elector.events();
    let mut leading_at_stop = false;
    loop {
        let term = tokio::select! {
            biased;
            _ = stop.stopped() => break,
            t = elector.wait_for_leadership() => match t {
                Ok(t) => t,
                Err(_) => break,
            },
        };
        if lead(&term, &stop, &mut reasons).await {
            leading_at_stop = true;
            break;
        }
    }
    elector.shutdown().await;
    if leading_at_stop {
        emit(&Report::Released { at: now() });
    }
    // The Ousted event of the last term may still be in flight.
    drop(elector);
    let _ = tokio::time::timeout(Duration::from_secs(1), reporter).await;
    Ok(0)
}

/// An elector builder on the candidate's store: a lease store, or on
/// `kafka://` a coordinator whose heartbeat timeout is the term (as for
/// `tenure run`).
async fn builder(
    url: &StoreUrl,
    args: &DemoCandidateArgs,
) -> anyhow::Result<tenure::ElectorBuilder> {
    #[cfg(feature = "kafka")]
    if url.scheme() == "kafka" {
        let coordinator = crate::kafka::coordinator(&args.store, Some(args.term))?;
        return Ok(Elector::with_coordinator(coordinator, &args.group));
    }
    Ok(Elector::builder(url.open().await?, &args.group))
}

/// "Works" for one term: reports its start, every renewal, and its end.
/// Returns whether it stopped because the candidate is shutting down.
async fn lead(term: &Term, stop: &Stop, reasons: &mut EventStream) -> bool {
    let guard = term.hold();
    let token = term.token();
    let mut deadline = term.deadline_mono();
    emit(&Report::Elected {
        token,
        at: now(),
        deadline_mono: deadline.as_nanos(),
    });
    let check = |deadline: &mut tenure::MonoTime| {
        let d = term.deadline_mono();
        if d != *deadline {
            *deadline = d;
            emit(&Report::Renewed {
                token,
                at: now(),
                deadline_mono: d.as_nanos(),
            });
        }
    };
    let stopping = loop {
        tokio::select! {
            biased;
            _ = term.cancelled() => break false,
            _ = stop.stopped() => break true,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
        check(&mut deadline);
    };
    // A renewal that landed in the last few milliseconds still counts.
    check(&mut deadline);
    let at = now();
    let reason = if stopping {
        // The elector is not told yet; it will be, by shutdown().
        "shutdown".to_owned()
    } else {
        reason_for(token, reasons).await
    };
    emit(&Report::Ended { token, at, reason });
    drop(guard);
    stopping
}

/// The reason the term `token` ended. The elector sends its `Ousted` event
/// in the same step as it cancels the term, so it is already queued; the
/// timeout only guards against a library that stops doing so.
async fn reason_for(token: u64, reasons: &mut EventStream) -> String {
    let find = async {
        while let Some(event) = reasons.next().await {
            if let Event::Ousted { token: t, reason } = event {
                if t == token {
                    return reason.to_string();
                }
            }
        }
        "elector stopped".to_owned()
    };
    tokio::time::timeout(Duration::from_millis(100), find)
        .await
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn emit(report: &Report) {
    if let Ok(line) = serde_json::to_string(report) {
        // The orchestrator may be gone; then nobody needs the line.
        let _ = out::line(&line);
    }
}
