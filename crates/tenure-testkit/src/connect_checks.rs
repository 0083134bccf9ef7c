//! Checks on how a networked store fails to connect, the same for every
//! store: nothing listening is a quick, transient `Unavailable`; TLS to a
//! server that speaks plain text fails quickly, saying which scheme to
//! use, and never shows the password.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::time::Duration;

use super::scenarios::timed;
use tenure::error::StoreError;

/// How long a refused connection may take, with the 1 s timeout the
/// checks' URLs carry.
const QUICKLY: Duration = Duration::from_secs(3);

/// Calls `connect` with `127.0.0.1:PORT`, a port nothing listens on (it
/// builds the store's URL from it, with a 1 s timeout): the connection
/// must fail within 3 s with an error the store calls transient
/// (`is_transient`) and that is [`StoreError::Unavailable`] as a
/// `StoreError`.
pub async fn unreachable_is_unavailable<S, E, Fut>(
    connect: impl FnOnce(String) -> Fut,
    is_transient: impl Fn(&E) -> bool,
) where
    Fut: Future<Output = Result<S, E>>,
    E: Debug + Into<StoreError>,
{
    let address = format!("127.0.0.1:{}", super::free_port());
    // Boxed: a store's connect future can be large (etcd's is 20 KB).
    let (connected, took) = timed(Box::pin(connect(address))).await;
    let Err(err) = connected else {
        panic!("connected to a port nothing listens on");
    };
    assert!(is_transient(&err), "{err:?}");
    assert!(took < QUICKLY, "{took:?}");
    let err: StoreError = err.into();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
}

/// Awaits `connecting`, a TLS connection (with a 1 s timeout) to a server
/// that speaks plain text: it must fail within 3 s, saying `advice` (such
/// as "use etcd:// instead of etcds://"), and its text must not show
/// `secret`, the URL's password. Returns the error for the store's own
/// checks.
pub async fn tls_to_a_plain_server_fails<S, E>(
    connecting: impl Future<Output = Result<S, E>>,
    advice: &str,
    secret: &str,
) -> E
where
    E: Display,
{
    let (connected, took) = timed(Box::pin(connecting)).await;
    let Err(err) = connected else {
        panic!("connected with TLS to a plain server");
    };
    let text = err.to_string();
    eprintln!("TLS to a plain server: {text} (after {took:?})");
    assert!(text.contains(advice), "{text}");
    assert!(!text.contains(secret), "shows the password: {text}");
    assert!(took < QUICKLY, "took {took:?}");
    err
}
