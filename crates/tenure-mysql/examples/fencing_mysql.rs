//! Fencing a MySQL or MariaDB table: a leader whose term has ended cannot
//! overwrite its successor's work.
//!
//! Leader A takes term n and writes a report; A then stalls (a GC pause, a
//! `SIGSTOP`) with a second write in flight, its term ends, and B takes
//! term n+1 and writes. When A's late write arrives with token n, the table
//! refuses it, in two ways:
//!
//! * `fenced_where`: the guard is in the statement,
//!   `UPDATE … WHERE fence_token <= ?`; zero rows matched means refused
//!   (the connection counts matched rows, `CLIENT_FOUND_ROWS`, so a write
//!   that changes nothing is not mistaken for a refusal);
//! * `fenced_trigger`: a plain `UPDATE`, refused by the trigger from
//!   `tenure_mysql::fence::trigger_sql`.
//!
//! Run: `cargo run -p tenure-mysql --example fencing_mysql -- mysql://USER:PASSWORD@HOST/DB`
//! (or set `TENURE_TEST_MYSQL`). `tests/fencing.rs` runs this same code
//! against the test server. The recipes are explained in `docs/fencing.md`.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use tenure::fence::StaleToken;
use tenure_mysql::{fence, MysqlStore};
use tenure_testkit::{unique_suffix, url_argument, HandOver};

type Error = tenure_testkit::StoryError;

/// The two recipes `write` applies, in the order of its answers.
const RECIPES: [&str; 2] = ["WHERE", "trigger"];

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&url_argument("TENURE_TEST_MYSQL", "a MySQL URL")?).await
}

/// The two fenced tables; each row carries the token of its last writer.
const TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS fenced_where (
        name VARCHAR(100) PRIMARY KEY,
        body TEXT NOT NULL,
        fence_token BIGINT UNSIGNED NOT NULL
    ) ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS fenced_trigger (
        name VARCHAR(100) PRIMARY KEY,
        body TEXT NOT NULL,
        fence_token BIGINT UNSIGNED NOT NULL
    ) ENGINE = InnoDB",
];

/// A plain connection to the database of a tenure URL (`mysql://` or
/// `mariadb://`, its options left out), counting matched rows.
pub async fn connect(url: &str) -> Result<Conn, Error> {
    let base = url.split('?').next().unwrap_or(url);
    let base = base.replacen("mariadb://", "mysql://", 1);
    let opts = OptsBuilder::from_opts(Opts::from_url(&base)?)
        .client_found_rows(true)
        .prefer_socket(false);
    Ok(Conn::new(opts).await?)
}

/// Creates the tables and the trigger once (another copy of this example
/// may be setting up at the same time: a named lock keeps them apart).
pub async fn set_up(db: &mut Conn) -> Result<(), Error> {
    let locked: Option<i64> = db
        .query_first("SELECT GET_LOCK('tenure fencing example', 30)")
        .await?;
    if locked != Some(1) {
        return Err("could not take the example's setup lock".into());
    }
    for sql in TABLES {
        db.query_drop(sql).await?;
    }
    let triggers: Option<i64> = db
        .query_first(
            "SELECT COUNT(*) FROM information_schema.triggers
             WHERE trigger_schema = DATABASE() AND trigger_name = 'fenced_trigger_tenure_fence'",
        )
        .await?;
    if triggers == Some(0) {
        db.query_drop(fence::trigger_sql("fenced_trigger")).await?;
    }
    db.query_drop("DO RELEASE_LOCK('tenure fencing example')")
        .await?;
    Ok(())
}

/// A leader's write to both tables, as each recipe makes it.
async fn write(
    db: &mut Conn,
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
    db: &mut Conn,
    report: &str,
    body: &str,
    token: u64,
) -> Result<Result<(), StaleToken>, Error> {
    db.exec_drop(
        "UPDATE fenced_where SET body = ?, fence_token = ? WHERE name = ? AND fence_token <= ?",
        (body, token, report, token),
    )
    .await?;
    if db.affected_rows() == 1 {
        return Ok(Ok(()));
    }
    // Refused. Read the token that refused it, for the message only.
    let highest: Option<u64> = db
        .exec_first(
            "SELECT fence_token FROM fenced_where WHERE name = ?",
            (report,),
        )
        .await?;
    Ok(Err(StaleToken {
        token,
        highest: highest.ok_or("the report's row is gone")?,
    }))
}

/// A plain update; the trigger refuses it if a later term wrote the row.
async fn write_trigger(
    db: &mut Conn,
    report: &str,
    body: &str,
    token: u64,
) -> Result<Result<(), StaleToken>, Error> {
    let result = db
        .exec_drop(
            "UPDATE fenced_trigger SET body = ?, fence_token = ? WHERE name = ?",
            (body, token, report),
        )
        .await;
    match result {
        Ok(()) if db.affected_rows() == 1 => Ok(Ok(())),
        Ok(()) => Err(format!(
            "updated {} rows of fenced_trigger, expected 1",
            db.affected_rows()
        )
        .into()),
        Err(e) => match fence::stale_token(&e) {
            Some(stale) => Ok(Err(stale)),
            None => Err(e.into()),
        },
    }
}

/// Runs the story against the server at `url`; fails if the stale write is
/// admitted by either table, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    let mut db = connect(url).await?;
    set_up(&mut db).await?;
    // Distinct per run, so runs against a shared server never meet.
    let run_id = format!("{:x}", unique_suffix());
    let report = format!("report-{run_id}");
    for table in ["fenced_where", "fenced_trigger"] {
        db.exec_drop(
            format!("INSERT INTO {table} (name, body, fence_token) VALUES (?, '', 0)"),
            (&report,),
        )
        .await?;
    }

    // Two candidates, as two processes would be, each with its own store.
    let group = format!("fencing-example-{run_id}");
    let story = HandOver::start(MysqlStore::connect(url).await?, &group).await?;
    let mut story = story.and_b(MysqlStore::connect(url).await?)?;
    let written = write(&mut db, &report, "by A", story.token_a()).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(written) {
        story.a_wrote(recipe, outcome)?;
    }
    let token_b = story.a_stalls().await?;
    let written = write(&mut db, &report, "by B", token_b).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(written) {
        story.b_wrote(recipe, outcome)?;
    }
    // A wakes up and its write arrives.
    let late = write(&mut db, &report, "by A, late", story.token_a()).await?;
    for (recipe, outcome) in RECIPES.into_iter().zip(late) {
        story.a_late_write_refused(recipe, outcome)?;
    }
    for table in ["fenced_where", "fenced_trigger"] {
        let body: Option<String> = db
            .exec_first(
                format!("SELECT body FROM {table} WHERE name = ?"),
                (&report,),
            )
            .await?;
        if body.as_deref() != Some("by B") {
            return Err(format!("{table} holds {body:?}, not B's write").into());
        }
    }
    story.finish().await;
    for table in ["fenced_where", "fenced_trigger"] {
        db.exec_drop(format!("DELETE FROM {table} WHERE name = ?"), (&report,))
            .await?;
    }
    Ok(())
}
