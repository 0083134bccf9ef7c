//! Fencing a PostgreSQL table: a leader whose term has ended cannot
//! overwrite its successor's work.
//!
//! Leader A takes term n and writes a report; A then stalls (a GC pause, a
//! `SIGSTOP`) with a second write in flight, its term ends, and B takes
//! term n+1 and writes. When A's late write arrives with token n, the table
//! refuses it, in two ways:
//!
//! * `fenced_where`: the guard is in the statement,
//!   `UPDATE … WHERE fence_token <= $token`; zero rows means refused;
//! * `fenced_trigger`: a plain `UPDATE`, refused by the trigger from
//!   `tenure_postgres::fence::TRIGGER_FUNCTION_SQL`.
//!
//! Run: `cargo run -p tenure-postgres --example fencing_postgres -- postgres://USER:PASSWORD@HOST/DB`
//! (or set `TENURE_TEST_POSTGRES`). `tests/fencing.rs` runs this same code
//! against the test server. The recipes are explained in `docs/fencing.md`.

use tenure::fence::StaleToken;
use tenure_postgres::{fence, PostgresStore};
use tenure_testkit::{unique_suffix, url_argument, HandOver};
use tokio_postgres::{Client, NoTls};

type Error = tenure_testkit::StoryError;

/// The two recipes `write` applies, in the order of its answers.
const RECIPES: [&str; 2] = ["WHERE", "trigger"];

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&url_argument("TENURE_TEST_POSTGRES", "a PostgreSQL URL")?).await
}

/// The two fenced tables; each row carries the token of its last writer.
const SETUP_SQL: &str = "
CREATE TABLE IF NOT EXISTS fenced_where (
    name text PRIMARY KEY,
    body text NOT NULL,
    fence_token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS fenced_trigger (
    name text PRIMARY KEY,
    body text NOT NULL,
    fence_token bigint NOT NULL
);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname = 'fenced_trigger_fence' AND tgrelid = 'fenced_trigger'::regclass) THEN
        CREATE TRIGGER fenced_trigger_fence BEFORE UPDATE ON fenced_trigger
            FOR EACH ROW EXECUTE FUNCTION tenure_refuse_stale_fence_token();
    END IF;
END $$;
";

/// A leader's write to both tables, as each recipe makes it.
async fn write(
    db: &Client,
    report: &str,
    body: &str,
    token: u64,
) -> Result<[Result<(), StaleToken>; 2], Error> {
    Ok([
        write_where(db, report, body, token).await?,
        write_trigger(db, report, body, token).await?,
    ])
}

/// The guard in the statement: the row is written only if no later term
/// has written it. The row lock makes the check and the write one step.
async fn write_where(
    db: &Client,
    report: &str,
    body: &str,
    token: u64,
) -> Result<Result<(), StaleToken>, Error> {
    let fence = i64::try_from(token)?;
    let updated = db
        .execute(
            "UPDATE fenced_where SET body = $1, fence_token = $2
             WHERE name = $3 AND fence_token <= $2",
            &[&body, &fence, &report],
        )
        .await?;
    if updated == 1 {
        return Ok(Ok(()));
    }
    // Refused. Read the token that refused it, for the message only.
    let highest: i64 = db
        .query_one(
            "SELECT fence_token FROM fenced_where WHERE name = $1",
            &[&report],
        )
        .await?
        .get(0);
    Ok(Err(StaleToken {
        token,
        highest: u64::try_from(highest)?,
    }))
}

/// A plain update; the trigger refuses it if a later term wrote the row.
async fn write_trigger(
    db: &Client,
    report: &str,
    body: &str,
    token: u64,
) -> Result<Result<(), StaleToken>, Error> {
    let fence = i64::try_from(token)?;
    let result = db
        .execute(
            "UPDATE fenced_trigger SET body = $1, fence_token = $2 WHERE name = $3",
            &[&body, &fence, &report],
        )
        .await;
    match result {
        Ok(1) => Ok(Ok(())),
        Ok(n) => Err(format!("updated {n} rows of fenced_trigger, expected 1").into()),
        Err(e) => match fence::stale_token(&e) {
            Some(stale) => Ok(Err(stale)),
            None => Err(e.into()),
        },
    }
}

/// Runs the story against the server at `url`; fails if the stale write is
/// admitted by either table, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    let (db, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    // Another copy of this example may be setting up at the same time.
    db.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock(hashtext('tenure fencing example'));
         {} {SETUP_SQL} COMMIT;",
        fence::TRIGGER_FUNCTION_SQL
    ))
    .await?;
    // Distinct per run, so runs against a shared server never meet.
    let run_id = format!("{:x}", unique_suffix());
    let report = format!("report-{run_id}");
    for table in ["fenced_where", "fenced_trigger"] {
        db.execute(
            &format!("INSERT INTO {table} (name, body, fence_token) VALUES ($1, '', 0)"),
            &[&report],
        )
        .await?;
    }

    // Two candidates, as two processes would be, each with its own store.
    let group = format!("fencing-example-{run_id}");
    let story = HandOver::start(PostgresStore::connect(url).await?, &group).await?;
    let mut story = story.and_b(PostgresStore::connect(url).await?)?;
    let written = write(&db, &report, "by A", story.token_a()).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(written) {
        story.a_wrote(recipe, outcome)?;
    }
    let token_b = story.a_stalls().await?;
    let written = write(&db, &report, "by B", token_b).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(written) {
        story.b_wrote(recipe, outcome)?;
    }
    // A wakes up and its write arrives.
    let late = write(&db, &report, "by A, late", story.token_a()).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(late) {
        story.a_late_write_refused(recipe, outcome)?;
    }
    for table in ["fenced_where", "fenced_trigger"] {
        let body: String = db
            .query_one(
                &format!("SELECT body FROM {table} WHERE name = $1"),
                &[&report],
            )
            .await?
            .get(0);
        if body != "by B" {
            return Err(format!("{table} holds {body:?}, not B's write").into());
        }
    }
    story.finish().await;
    for table in ["fenced_where", "fenced_trigger"] {
        db.execute(&format!("DELETE FROM {table} WHERE name = $1"), &[&report])
            .await?;
    }
    Ok(())
}
