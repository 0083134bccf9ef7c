//! Fencing etcd keys: one transaction that compares the writer's token with
//! a fence key and makes the writes only if no higher token was admitted.
//!
//! ```no_run
//! use etcd_client::{Client, TxnOp};
//! use tenure_etcd::fence;
//!
//! # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = Client::connect(["127.0.0.1:2379"], None).await?;
//! let writes = vec![TxnOp::put("billing/report", "…", None)];
//! match fence::fenced_txn(&mut client, "billing/fence", token, writes).await? {
//!     Ok(_) => println!("written"),
//!     Err(stale) => println!("refused: {stale}"), // a later term has written
//! }
//! # Ok(()) }
//! ```
//!
//! etcd compares values as bytes, so the fence key holds the token as 20
//! zero-padded digits ([`fence_value`]), whose byte order is the numeric
//! order of every `u64`. Let only this function (or writers using
//! [`fence_value`]) write the fence key. `examples/fencing_etcd.rs` runs a stale
//! leader against it; `docs/fencing.md` in the repository has the other
//! recipes.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tenure::fence::StaleToken;

/// How a fence key holds `token`: 20 digits, zero-padded, so that etcd's
/// byte-wise comparison of values orders tokens as numbers.
///
/// ```
/// assert_eq!(tenure_etcd::fence::fence_value(42), "00000000000000000042");
/// assert!(tenure_etcd::fence::fence_value(9) < tenure_etcd::fence::fence_value(10));
/// ```
pub fn fence_value(token: u64) -> String {
    format!("{token:020}")
}

/// In one transaction: if `fence_key` holds a token above `token`, refuse;
/// otherwise put `token` in `fence_key` and apply `writes`. A fence key
/// that does not exist admits any token.
///
/// Returns the transaction's response when it wrote (its responses are the
/// fence put's, then one per write), or the refusal. The outer error is
/// etcd's, or a fence key whose value is not a [`fence_value`].
pub async fn fenced_txn(
    client: &mut Client,
    fence_key: &str,
    token: u64,
    writes: Vec<TxnOp>,
) -> Result<Result<TxnResponse, StaleToken>, etcd_client::Error> {
    let mut admitted = vec![TxnOp::put(fence_key, fence_value(token), None)];
    admitted.extend(writes);
    // Phrased as "is the fence above mine": etcd fails a value comparison
    // on a missing key, so a fresh fence takes the else branch and admits.
    let txn = Txn::new()
        .when([Compare::value(
            fence_key,
            CompareOp::Greater,
            fence_value(token),
        )])
        .and_then([TxnOp::get(fence_key, None)])
        .or_else(admitted);
    let response = client.txn(txn).await?;
    if !response.succeeded() {
        return Ok(Ok(response));
    }
    let highest = match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get
            .kvs()
            .first()
            .and_then(|kv| std::str::from_utf8(kv.value()).ok())
            .filter(|v| v.len() == 20)
            .and_then(|v| v.parse::<u64>().ok()),
        _ => None,
    };
    match highest {
        Some(highest) => Ok(Err(StaleToken { token, highest })),
        None => Err(etcd_client::Error::InvalidArgs(format!(
            "the fence key {fence_key:?} holds something other than a 20-digit token: let only fenced_txn write it"
        ))),
    }
}
