//! `KinesisShards` against a real kinesalite (`TENURE_TEST_KINESIS`, from
//! `scripts/servers.sh`): the listing of a stream as it is split and
//! merged, typed errors, and a sharded set that follows a resharded
//! stream. Paging with `NextToken`, which kinesalite does not implement
//! (it returns every shard in one page), is checked against a scripted
//! HTTP server that does.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::Client;
use tenure::shards::{ShardSource, SourceShard};
use tenure::{MemoryStore, Shards};
use tenure_kinesis::{KinesisError, KinesisShards};
use tenure_testkit::holders::{self, Holders};

mod common;
use common::{create_stream, delete_stream, source, wait_active};

/// The kinesalite endpoint, or `None` (the test skips; with `CI=true` it
/// fails instead).
fn endpoint() -> Option<String> {
    tenure_testkit::server_url("TENURE_TEST_KINESIS")
}

fn unique(label: &str) -> String {
    format!("{label}-{:x}", tenure_testkit::unique_suffix())
}

/// The SDK's view of the stream's shards (hash ranges for splits).
async fn sdk_shards(client: &Client, stream: &str) -> Vec<aws_sdk_kinesis::types::Shard> {
    client
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("list shards")
        .shards()
        .to_vec()
}

/// Splits `shard` in the middle of its hash range; waits for ACTIVE.
async fn split(client: &Client, stream: &str, shard: &str) {
    let all = sdk_shards(client, stream).await;
    let s = all
        .iter()
        .find(|s| s.shard_id() == shard)
        .expect("the shard to split");
    let range = s.hash_key_range().expect("hash range");
    let start: u128 = range.starting_hash_key().parse().unwrap();
    let end: u128 = range.ending_hash_key().parse().unwrap();
    let middle = start + (end - start) / 2 + 1;
    client
        .split_shard()
        .stream_name(stream)
        .shard_to_split(shard)
        .new_starting_hash_key(middle.to_string())
        .send()
        .await
        .expect("split shard");
    wait_active(client, stream).await;
}

async fn merge(client: &Client, stream: &str, shard: &str, adjacent: &str) {
    client
        .merge_shards()
        .stream_name(stream)
        .shard_to_merge(shard)
        .adjacent_shard_to_merge(adjacent)
        .send()
        .await
        .expect("merge shards");
    wait_active(client, stream).await;
}

/// kinesalite's shard ids: `shardId-000000000000`, …
fn id(n: u32) -> String {
    format!("shardId-{n:012}")
}

fn names(shards: &[SourceShard]) -> Vec<&str> {
    shards.iter().map(|s| s.name.as_str()).collect()
}

fn parents_of<'a>(shards: &'a [SourceShard], shard: &str) -> Vec<&'a str> {
    let s = shards
        .iter()
        .find(|s| s.name == shard)
        .unwrap_or_else(|| panic!("{shard} not listed: {shards:?}"));
    s.parents.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn lists_every_shard_of_a_new_stream_without_parents() {
    let Some(endpoint) = endpoint() else { return };
    let stream = unique("list");
    let (source, client) = source(&endpoint, &stream).await;
    create_stream(&client, &stream, 3).await;
    // Through the trait, as a catalog leader calls it.
    let listed = ShardSource::list(&source).await.expect("list");
    assert_eq!(names(&listed), [id(0), id(1), id(2)]);
    assert!(listed.iter().all(|s| s.parents.is_empty()), "{listed:?}");
    assert_eq!(source.stream(), stream);
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn children_of_a_split_name_their_parent_and_a_merge_names_both() {
    let Some(endpoint) = endpoint() else { return };
    let stream = unique("reshard");
    let (source, client) = source(&endpoint, &stream).await;
    create_stream(&client, &stream, 2).await;

    split(&client, &stream, &id(0)).await;
    let listed = source.list_shards().await.expect("list");
    // The closed parent stays listed until retention removes it.
    assert_eq!(names(&listed), [id(0), id(1), id(2), id(3)]);
    assert_eq!(parents_of(&listed, &id(0)), Vec::<&str>::new());
    assert_eq!(parents_of(&listed, &id(1)), Vec::<&str>::new());
    assert_eq!(parents_of(&listed, &id(2)), [id(0)]);
    assert_eq!(parents_of(&listed, &id(3)), [id(0)]);

    // The two children of the split are adjacent: merge them back.
    merge(&client, &stream, &id(2), &id(3)).await;
    let listed = source.list_shards().await.expect("list");
    assert_eq!(names(&listed), [id(0), id(1), id(2), id(3), id(4)]);
    assert_eq!(parents_of(&listed, &id(4)), [id(2), id(3)]);
    // Through the trait the same.
    assert_eq!(ShardSource::list(&source).await.expect("list"), listed);
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn a_small_page_still_lists_every_shard() {
    let Some(endpoint) = endpoint() else { return };
    let stream = unique("pages");
    let (source, client) = source(&endpoint, &stream).await;
    create_stream(&client, &stream, 12).await;
    let listed = source.page_size(5).list_shards().await.expect("list");
    let want: Vec<String> = (0..12).map(id).collect();
    assert_eq!(names(&listed), want);
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn a_missing_stream_is_stream_not_found_naming_it_and_the_fix() {
    let Some(endpoint) = endpoint() else { return };
    let stream = unique("missing");
    let (source, _) = source(&endpoint, &stream).await;
    let e = source.list_shards().await.unwrap_err();
    match &e {
        KinesisError::StreamNotFound { stream: s, .. } => assert_eq!(s, &stream),
        other => panic!("not StreamNotFound: {other:?}"),
    }
    assert!(!e.is_transient());
    let text = e.to_string();
    assert!(
        text.contains(&stream) && text.contains("create-stream"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_and_shows_no_credentials() {
    // A port nothing listens on (closed at once).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let source = KinesisShards::connect(&format!(
        "kinesis://s?endpoint=http://127.0.0.1:{port}&region=us-east-1\
         &access_key_id=AKIDLOCALWXYZ&secret_access_key=TOPSECRET"
    ))
    .await
    .unwrap();
    // Neither the source's Debug nor the checkpoint table's (both hold an
    // SDK client, whose own Debug prints the access key id).
    let checkpoints = tenure_kinesis::Checkpoints::new(
        tenure_dynamodb::aws_sdk_dynamodb::Client::from_conf(
            tenure_dynamodb::aws_sdk_dynamodb::Config::builder()
                .behavior_version_latest()
                .region(tenure_dynamodb::aws_sdk_dynamodb::config::Region::new(
                    "us-east-1",
                ))
                .credentials_provider(tenure_dynamodb::aws_sdk_dynamodb::config::Credentials::new(
                    "AKIDLOCALWXYZ",
                    "TOPSECRET",
                    Some("SESSIONTOKEN".to_owned()),
                    None,
                    "test",
                ))
                .build(),
        ),
        "cp",
    );
    for debug in [format!("{source:?}"), format!("{checkpoints:?}")] {
        assert!(
            !debug.contains("TOPSECRET")
                && !debug.contains("AKIDLOCAL")
                && !debug.contains("SESSIONTOKEN"),
            "{debug}"
        );
    }
    let e = source.list_shards().await.unwrap_err();
    assert!(matches!(e, KinesisError::Unavailable { .. }), "{e:?}");
    assert!(e.is_transient());
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        !text.contains("TOPSECRET") && !text.contains("AKIDLOCAL"),
        "{text}"
    );
}

/// A scripted Kinesis: answers ListShards with pages of `page` shards,
/// `NextToken` = the index of the next one, and records every request's
/// body.
async fn paging_server(total: usize, page: usize) -> (String, Arc<Mutex<Vec<String>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let endpoint = common::scripted(move |_, body| {
        seen.lock().unwrap().push(body.to_owned());
        let from = body
            .split("\"NextToken\":\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .map_or(0, |t| t.parse().unwrap());
        let to = (from + page).min(total);
        let shards: Vec<String> = (from..to)
            .map(|i| {
                format!(
                    r#"{{"ShardId":"shard-{i:03}","ParentShardId":"p-{i}","HashKeyRange":{{"StartingHashKey":"0","EndingHashKey":"1"}},"SequenceNumberRange":{{"StartingSequenceNumber":"1"}}}}"#
                )
            })
            .collect();
        let next = if to < total {
            format!(r#","NextToken":"{to}""#)
        } else {
            String::new()
        };
        (200, format!(r#"{{"Shards":[{}]{next}}}"#, shards.join(",")))
    })
    .await;
    (endpoint, bodies)
}

#[tokio::test]
async fn pages_follow_next_token_without_the_stream_name() {
    let (endpoint, bodies) = paging_server(7, 3).await;
    let (source, _) = source(&endpoint, "paged").await;
    let listed = source.page_size(3).list_shards().await.expect("list");
    let want: Vec<String> = (0..7).map(|i| format!("shard-{i:03}")).collect();
    assert_eq!(names(&listed), want);
    assert_eq!(parents_of(&listed, "shard-005"), ["p-5"]);
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert!(
        bodies[0].contains(r#""StreamName":"paged""#) && !bodies[0].contains("NextToken"),
        "{bodies:?}"
    );
    for (body, token) in bodies[1..].iter().zip(["3", "6"]) {
        assert!(
            body.contains(&format!(r#""NextToken":"{token}""#)) && !body.contains("StreamName"),
            "{bodies:?}"
        );
    }
    assert!(
        bodies.iter().all(|b| b.contains(r#""MaxResults":3"#)),
        "{bodies:?}"
    );
}

#[tokio::test]
async fn a_listing_that_never_ends_is_refused_not_held_for_ever() {
    // Empty pages, each with a NextToken, without end.
    let (endpoint, bodies) = paging_server(usize::MAX, 0).await;
    let (endless, _) = source(&endpoint, "endless").await;
    let e = endless.list_shards().await.unwrap_err();
    assert!(matches!(e, KinesisError::Endless { .. }), "{e:?}");
    assert!(!e.is_transient());
    assert!(bodies.lock().unwrap().len() <= 102);
    // More shards than any stream has.
    let (endpoint, _) = paging_server(200_000, 10_000).await;
    let (huge, _) = source(&endpoint, "huge").await;
    let e = huge.page_size(10_000).list_shards().await.unwrap_err();
    assert!(matches!(e, KinesisError::Endless { .. }), "{e:?}");
    assert!(
        e.to_string().contains("check that the endpoint is Kinesis"),
        "{e}"
    );
}

/// How long a change of the stream may take to show in who holds what:
/// a refresh, a poll, a hand-over; generous on a loaded machine.
const FOLLOW: Duration = Duration::from_secs(30);

struct Set {
    members: Vec<Shards>,
}

impl Set {
    fn holders(&self) -> Holders {
        holders::of_members(&self.members)
    }

    /// Waits until `done`, checking at every step that no shard is held
    /// twice (`holders::of_members` panics) and that `never` does not hold.
    async fn until(
        &self,
        what: &str,
        never: impl Fn(&Holders) -> Option<String>,
        done: impl Fn(&Holders) -> bool,
    ) -> Holders {
        let start = Instant::now();
        loop {
            let h = self.holders();
            if let Some(broken) = never(&h) {
                panic!("{broken}: {h:?}");
            }
            if done(&h) {
                return h;
            }
            assert!(
                start.elapsed() < FOLLOW,
                "{what}: not after {FOLLOW:?}: {h:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Checks for `span` that `never` does not hold.
    async fn during(&self, span: Duration, never: impl Fn(&Holders) -> Option<String>) {
        let start = Instant::now();
        while start.elapsed() < span {
            let h = self.holders();
            if let Some(broken) = never(&h) {
                panic!("{broken}: {h:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn held(h: &Holders) -> BTreeSet<String> {
    h.keys().cloned().collect()
}

#[tokio::test]
async fn a_set_follows_a_split_children_wait_for_their_parent_to_be_finished() {
    let Some(endpoint) = endpoint() else { return };
    let stream = unique("follow");
    let (source, client) = source(&endpoint, &stream).await;
    create_stream(&client, &stream, 2).await;

    let store = MemoryStore::new();
    let set = Set {
        members: ["a", "b"]
            .into_iter()
            .map(|m| {
                Shards::builder(store.clone(), "consumers")
                    .member_id(m)
                    .catalog(source.clone(), Duration::from_millis(300))
                    .term(Duration::from_secs(1))
                    .start()
                    .expect("valid")
            })
            .collect(),
    };
    let nothing = |_: &Holders| None;
    set.until("both shards held", nothing, |h| {
        held(h) == BTreeSet::from([id(0), id(1)])
    })
    .await;

    split(&client, &stream, &id(0)).await;
    // The catalog shows the children, blocked by their parent.
    let start = Instant::now();
    while !set.members.iter().all(|m| {
        m.catalog()
            .is_some_and(|c| c.shards.iter().any(|s| s.name == id(3)))
    }) {
        assert!(
            start.elapsed() < FOLLOW,
            "the children never reached the catalog"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for m in &set.members {
        assert_eq!(m.current_shards(), [id(0), id(1)], "{}", m.member_id());
    }
    let children_held = |h: &Holders| {
        (h.contains_key(&id(2)) || h.contains_key(&id(3)))
            .then(|| "a child held before its parent is finished".to_owned())
    };
    // Several refreshes and polls: the children wait, the parent stays in
    // every member's shards (and held: a term that lapses on a loaded
    // machine is taken over, so holding is checked after the span).
    set.during(Duration::from_secs(3), |h| {
        children_held(h).or_else(|| {
            set.members
                .iter()
                .find(|m| !m.current_shards().contains(&id(0)))
                .map(|m| format!("the parent left {}'s shards", m.member_id()))
        })
    })
    .await;
    let h = set
        .until("the parent held", children_held, |h| h.contains_key(&id(0)))
        .await;

    // The parent's holder reads it to its end and marks it finished.
    let holder = &set.members[usize::from(h[&id(0)] == "b")];
    let term = holder.held().remove(&id(0)).expect("the parent held");
    holder.mark_finished(&id(0), &term).await.expect("marked");
    let h = set
        .until("the children held", nothing, |h| {
            held(h) == BTreeSet::from([id(1), id(2), id(3)])
        })
        .await;
    assert!(!h.contains_key(&id(0)), "{h:?}");
    for m in &set.members {
        let catalog = m.catalog().expect("a catalog");
        assert!(
            catalog.shards.iter().all(|s| s.name != id(0)),
            "the finished parent is still in {}'s catalog: {catalog:?}",
            m.member_id()
        );
    }
    for m in set.members {
        m.shutdown().await;
    }
    delete_stream(&client, &stream).await;
}
