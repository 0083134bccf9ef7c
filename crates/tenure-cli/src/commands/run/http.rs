//! The observability endpoint of `tenure run --metrics-addr`: a minimal
//! HTTP/1.1 server (GET only, one request per connection) with
//!
//! * `/metrics`: Prometheus text from the `metrics` facade the library
//!   reports through (`tenure_is_leader`, `tenure_transitions_total`, …);
//! * `/healthz`: 200, or 503 while this process believes it leads but its
//!   term is past due (client-go's `HealthzAdaptor`): a leader stuck that
//!   way is wedged, and a supervisor should restart it;
//! * `/readyz`: 200 only while this process leads with a term still in
//!   force, 503 otherwise (a candidate, a follower, a leader past its
//!   deadline or stepping down): a readiness probe, so that a Service
//!   sends traffic to the leader alone. client-go's `HealthzAdaptor` has
//!   no such check (it only fails a leader past its deadline, as
//!   `/healthz` does); its users add a readiness check of their own;
//! * `/leader`: JSON of the leader as this process sees it.
//!
//! Small enough not to need an HTTP stack; it never reads a request body.
//!
//! It shares the process that must renew the lease, so a flood of clients
//! must not starve it of file descriptors or memory: at most
//! [`MAX_CONNECTIONS`] are served at once (a connection beyond that gets a
//! 503 and is closed at once, so the listen backlog drains and no
//! descriptor is held for it), and each whole exchange, from accept to the
//! last byte written, is bounded by [`EXCHANGE_TIMEOUT`], the request head
//! alone by [`READ_TIMEOUT`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tenure::{Elector, Metadata, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::view;

/// Longest request head read, in bytes.
const MAX_HEAD: usize = 8 * 1024;
/// A client gets this long to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// A whole exchange (request and response) gets this long.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// The whole answer to a connection beyond [`MAX_CONNECTIONS`].
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Installs the Prometheus recorder as the global `metrics` recorder, and
/// runs its upkeep (histogram draining) in the background.
pub fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        // The renewal latency as a histogram (aggregatable across
        // processes), not the exporter's default summary.
        .set_buckets_for_metric(
            Matcher::Full(tenure::metrics::RENEW_LATENCY.to_owned()),
            tenure::metrics::RENEW_LATENCY_BUCKETS,
        )
        .context("cannot set the renewal latency's buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    // `# HELP` for every series (`# TYPE` comes with the first sample).
    tenure::metrics::describe();
    #[cfg(feature = "dynamodb")]
    tenure_dynamodb::retry::describe_metrics();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// What the endpoints read: the metrics, and the elector currently
/// standing (replaced when `run` stands again after a back-off).
#[derive(Clone)]
pub struct Sources {
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// The current elector, if any.
    pub elector: watch::Receiver<Option<Elector>>,
    /// What this candidate publishes when it leads.
    pub metadata: Metadata,
}

/// Binds `addr` and serves in the background. Binding errors are returned
/// (a port in use is a one-line failure at start, not a silent gap).
pub async fn serve(addr: SocketAddr, sources: Sources) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --metrics-addr"))?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "serving /metrics, /healthz, /readyz and /leader");
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Full: say so without waiting on the client, and
                        // free the descriptor at once.
                        let _ = stream.try_write(BUSY);
                        continue;
                    };
                    let sources = sources.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        match tokio::time::timeout(EXCHANGE_TIMEOUT, handle(stream, &sources)).await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!(error = %e, "HTTP request failed"),
                            Err(_) => tracing::debug!("HTTP exchange took too long; dropped"),
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors, say: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(local)
}

/// A response before encoding.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
}

async fn handle(mut stream: TcpStream, sources: &Sources) -> std::io::Result<()> {
    let request = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(r) => r?,
        Err(_) => return Ok(()),
    };
    let mut response = respond(&request, sources);
    let is_head = request.starts_with("HEAD ");
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Unknown",
    };
    let headers = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    stream.write_all(headers.as_bytes()).await?;
    if is_head {
        // HEAD gets the headers (and the length) of GET, without the body.
        response.body.clear();
    }
    stream.write_all(response.body.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads up to the blank line ending the request head.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_HEAD {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn respond(head: &str, sources: &Sources) -> Response {
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return text(400, "bad request\n");
    };
    if method != "GET" && method != "HEAD" {
        return text(405, "only GET\n");
    }
    let path = target.split('?').next().unwrap_or(target);
    let elector = sources.elector.borrow().clone();
    match path {
        "/metrics" => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: sources.metrics.render(),
        },
        "/healthz" => healthz(elector.as_ref()),
        "/readyz" => readyz(elector.as_ref()),
        "/leader" => Response {
            status: 200,
            content_type: "application/json",
            body: leader_json(elector.as_ref(), &sources.metadata),
        },
        _ => text(
            404,
            "not found: try /metrics, /healthz, /readyz or /leader\n",
        ),
    }
}

fn text(status: u16, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.to_owned(),
    }
}

/// 503 only for the wedged-leader case; a follower or a candidate waiting
/// for the store is healthy as far as leadership goes.
fn healthz(elector: Option<&Elector>) -> Response {
    if let Some(Role::Leader(term)) = elector.map(Elector::role) {
        if term.remaining().is_zero() {
            return text(
                503,
                &format!(
                    "unhealthy: leading group {} with token {} but the term is past its deadline\n",
                    term.group(),
                    term.token()
                ),
            );
        }
    }
    text(200, "ok\n")
}

/// 200 only for a leader whose term is still in force: the readiness
/// probe of a sidecar, so that only the leader's pod is ready.
fn readyz(elector: Option<&Elector>) -> Response {
    match elector.map(Elector::role) {
        Some(Role::Leader(term)) if !term.remaining().is_zero() => text(
            200,
            &format!(
                "ready: leading group {} with token {}\n",
                term.group(),
                term.token()
            ),
        ),
        Some(Role::Leader(_)) => text(503, "not ready: the term is past its deadline\n"),
        _ => text(503, "not ready: not the leader\n"),
    }
}

/// The body of `/leader`.
#[derive(Serialize)]
struct LeaderView {
    group: Option<String>,
    candidate: Option<String>,
    role: &'static str,
    leader: Option<LeaderRef>,
    term: Option<TermJson>,
}

/// The leader: this process or another.
#[derive(Serialize)]
struct LeaderRef {
    candidate: String,
    token: u64,
    is_self: bool,
    metadata: BTreeMap<String, String>,
    expires_at: String,
}

/// This process's own term, when it leads.
#[derive(Serialize)]
struct TermJson {
    token: u64,
    remaining_ms: u64,
    deadline: String,
    cancelled: bool,
}

fn leader_json(elector: Option<&Elector>, metadata: &Metadata) -> String {
    let view = match elector {
        None => LeaderView {
            group: None,
            candidate: None,
            role: "stopped",
            leader: None,
            term: None,
        },
        Some(e) => {
            let (role, leader, term) = match e.role() {
                Role::Leader(t) => (
                    "leader",
                    Some(LeaderRef {
                        candidate: e.candidate_id().to_owned(),
                        token: t.token(),
                        is_self: true,
                        metadata: view::metadata_map(metadata),
                        expires_at: view::rfc3339(t.wall_deadline()),
                    }),
                    Some(TermJson {
                        token: t.token(),
                        remaining_ms: u64::try_from(t.remaining().as_millis()).unwrap_or(u64::MAX),
                        deadline: view::rfc3339(t.wall_deadline()),
                        cancelled: t.is_cancelled(),
                    }),
                ),
                Role::Follower { leader } => (
                    "follower",
                    Some(LeaderRef {
                        candidate: leader.candidate.clone(),
                        token: leader.token,
                        is_self: false,
                        metadata: view::metadata_map(&leader.metadata),
                        expires_at: view::rfc3339(leader.expires_at),
                    }),
                    None,
                ),
                Role::Stopped => ("stopped", None, None),
                _ => ("candidate", None, None),
            };
            LeaderView {
                group: Some(e.group().to_string()),
                candidate: Some(e.candidate_id().to_owned()),
                role,
                leader,
                term,
            }
        }
    };
    // Serializing strings, maps and integers cannot fail.
    view::json(&view).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use tenure::clock::Sleep;
    use tenure::{Clock, MemoryStore, MonoTime, Now, WallTime};

    use super::*;

    /// A clock that moves only when told to, and whose timers never fire:
    /// the elector cannot renew or step down, so its term stays in force
    /// on paper while time runs out — the wedged leader `/healthz` exists
    /// to catch.
    #[derive(Default)]
    struct FrozenDriverClock {
        nanos: AtomicU64,
    }

    impl Clock for FrozenDriverClock {
        fn now(&self) -> Now {
            Now {
                mono: MonoTime::from_nanos(self.nanos.load(Ordering::SeqCst)),
                wall: WallTime::now(),
            }
        }
        fn sleep_until(&self, _deadline: MonoTime) -> Sleep {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn healthz_fails_only_for_a_leader_past_its_deadline() {
        assert_eq!(healthz(None).status, 200);
        let clock = Arc::new(FrozenDriverClock::default());
        let elector = Elector::builder(MemoryStore::new(), "g")
            .candidate_id("me")
            .term(Duration::from_secs(2))
            .clock(clock.clone())
            .start()
            .unwrap();
        let term = elector.wait_for_leadership().await.unwrap();
        assert_eq!(healthz(Some(&elector)).status, 200);
        assert_eq!(readyz(None).status, 503);
        assert_eq!(readyz(Some(&elector)).status, 200);
        let body = leader_json(Some(&elector), &Metadata::address("10.0.0.7:1"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["role"], "leader");
        assert_eq!(v["leader"]["metadata"]["address"], "10.0.0.7:1");

        clock.nanos.fetch_add(3_000_000_000, Ordering::SeqCst);
        assert!(term.remaining().is_zero());
        assert!(elector.role().is_leader(), "the driver never woke up");
        let r = healthz(Some(&elector));
        assert_eq!(r.status, 503);
        assert!(r.body.contains("past its deadline"), "{}", r.body);
        assert_eq!(
            readyz(Some(&elector)).status,
            503,
            "a leader past its deadline is not ready"
        );
    }

    #[tokio::test]
    async fn readyz_is_ready_only_on_the_leader() {
        let store = MemoryStore::new();
        let a = Elector::builder(store.clone(), "g")
            .candidate_id("a")
            .term(Duration::from_secs(5))
            .start()
            .unwrap();
        a.wait_for_leadership().await.unwrap();
        let b = Elector::builder(store, "g")
            .candidate_id("b")
            .term(Duration::from_secs(5))
            .start()
            .unwrap();
        assert_eq!(readyz(Some(&a)).status, 200);
        assert!(!b.role().is_leader());
        let r = readyz(Some(&b));
        assert_eq!(r.status, 503, "{}", r.body);
        b.shutdown().await;
        a.shutdown().await;
        assert_eq!(readyz(Some(&a)).status, 503, "stopped");
    }
}
