//! Fencing an object in an S3-style bucket: a leader whose term has ended
//! cannot overwrite its successor's work.
//!
//! The object carries the token of the term that wrote it. Every write
//! reads the object (its ETag and token), applies `tenure::fence::check`,
//! and puts the new contents with `If-Match` on that ETag (`If-None-Match:
//! *` if there was none); if the object changed in between, it reads again.
//! Leader A takes term n and writes a report; A then stalls (a GC pause, a
//! `SIGSTOP`) with a second write in flight, its term ends, and B takes
//! term n+1 and writes. A's late write with token n is refused.
//!
//! Run: `cargo run -p tenure-object-store --example fencing_s3 -- 's3://BUCKET/PREFIX?region=…'`,
//! or with `TENURE_TEST_S3` set to an S3 emulator's endpoint (the bucket
//! `tenure-test`, any keys: what `scripts/servers.sh` starts).
//! `tests/fencing.rs` runs this same code against moto. The recipe is
//! explained in `docs/fencing.md`.

use serde::{Deserialize, Serialize};
use tenure::fence::{self, StaleToken};
use tenure_object_store::object_store::path::Path;
use tenure_object_store::object_store::{
    self, ObjectStore, ObjectStoreExt, PutMode, UpdateVersion,
};
use tenure_object_store::BucketStore;
use tenure_testkit::{unique_suffix, HandOver};

type Error = tenure_testkit::StoryError;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let endpoint = std::env::var("TENURE_TEST_S3")
                .map_err(|_| "give an s3:// URL as the first argument, or an emulator's endpoint in TENURE_TEST_S3")?;
            format!("s3://tenure-test/fencing-example?region=us-east-1&endpoint={endpoint}&access_key_id=test&secret_access_key=test")
        }
    };
    run(&url).await
}

/// What the fenced object holds: the report, and the token of its writer.
#[derive(Serialize, Deserialize)]
struct Report {
    fence_token: u64,
    body: String,
}

/// The object as read: the token it carries (`None`: no object yet) and
/// the condition a write that replaces it must meet.
pub struct Read {
    /// The token of the object's writer.
    pub token: Option<u64>,
    /// `If-Match` on the ETag read, or `If-None-Match: *`.
    pub condition: PutMode,
}

/// Step 1: read the object's token and version.
pub async fn read(bucket: &dyn ObjectStore, path: &Path) -> Result<Read, Error> {
    match bucket.get(path).await {
        Ok(got) => {
            let version = UpdateVersion {
                e_tag: got.meta.e_tag.clone(),
                version: got.meta.version.clone(),
            };
            let report: Report = serde_json::from_slice(&got.bytes().await?)?;
            Ok(Read {
                token: Some(report.fence_token),
                condition: PutMode::Update(version),
            })
        }
        Err(object_store::Error::NotFound { .. }) => Ok(Read {
            token: None,
            condition: PutMode::Create,
        }),
        Err(e) => Err(e.into()),
    }
}

/// Steps 2 and 3: refuse a token below the one read; else put the new
/// contents on the condition that the object is still the one read.
/// `Ok(false)`: it changed in between, read again.
pub async fn put_if_unchanged(
    bucket: &dyn ObjectStore,
    path: &Path,
    read: Read,
    token: u64,
    body: &str,
) -> Result<Result<bool, StaleToken>, Error> {
    if let Err(stale) = fence::check(read.token, token) {
        return Ok(Err(stale));
    }
    let contents = serde_json::to_vec(&Report {
        fence_token: token,
        body: body.to_owned(),
    })?;
    match bucket
        .put_opts(path, contents.into(), read.condition.into())
        .await
    {
        Ok(_) => Ok(Ok(true)),
        // 412 on If-Match, or the object appeared (If-None-Match), or S3's
        // 409 for a concurrent conditional write.
        Err(
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. },
        ) => Ok(Ok(false)),
        Err(e) => Err(e.into()),
    }
}

/// A leader's write: read, check, conditional put, until it is written or
/// refused.
pub async fn fenced_put(
    bucket: &dyn ObjectStore,
    path: &Path,
    token: u64,
    body: &str,
) -> Result<Result<(), StaleToken>, Error> {
    loop {
        let read = read(bucket, path).await?;
        match put_if_unchanged(bucket, path, read, token, body).await? {
            Ok(true) => return Ok(Ok(())),
            Ok(false) => continue,
            Err(stale) => return Ok(Err(stale)),
        }
    }
}

/// Runs the story on the bucket of the store URL `url`; fails if the stale
/// write is admitted, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    // Distinct per run, so runs against a shared server never meet.
    let run_id = format!("{:x}", unique_suffix());

    // Two candidates, as two processes would be, each with its own store.
    let group = format!("fencing-example-{run_id}");
    let store_a = BucketStore::connect(url).await?;
    // The report lives in the same bucket, beside the leases.
    let bucket = store_a.object_store().clone();
    let report = Path::from(format!("fencing-example-data/{run_id}/report.json"));
    let story = HandOver::start(store_a, &group).await?;
    let mut story = story.and_b(BucketStore::connect(url).await?)?;
    let written = fenced_put(bucket.as_ref(), &report, story.token_a(), "by A").await?;
    story.a_wrote("", written)?;
    let token_b = story.a_stalls().await?;
    let written = fenced_put(bucket.as_ref(), &report, token_b, "by B").await?;
    story.b_wrote("", written)?;
    // A wakes up and its write arrives.
    let late = fenced_put(bucket.as_ref(), &report, story.token_a(), "by A, late").await?;
    story.a_late_write_refused("", late)?;
    let stored: Report = serde_json::from_slice(&bucket.get(&report).await?.bytes().await?)?;
    if stored.body != "by B" || stored.fence_token != token_b {
        return Err(format!(
            "the report holds {:?} with token {}, not B's write",
            stored.body, stored.fence_token
        )
        .into());
    }
    story.finish().await;
    bucket.delete(&report).await?;
    Ok(())
}
