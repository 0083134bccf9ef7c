//! Fencing a PostgreSQL table (docs/fencing.md), against the real server:
//! the example itself, and the trigger's rule under concurrent writers.

use std::time::Duration;

use tenure::fence::StaleToken;
use tenure_postgres::fence;
use tenure_testkit as testkit;
use tokio_postgres::{Client, NoTls};

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_postgres`"
)]
#[path = "../examples/fencing_postgres.rs"]
mod example;

fn url() -> Option<String> {
    testkit::server_url("TENURE_TEST_POSTGRES")
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// The example as `cargo run --example fencing_postgres` runs it: A's late write
/// with token n after B wrote with n+1 is refused by both recipes.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let Some(url) = url() else { return };
    tenure_testkit::story_holds(example::run(&url)).await;
}

/// A table of its own with the trigger, dropped at the end.
struct TriggerTable {
    name: String,
}

impl TriggerTable {
    async fn create(db: &Client) -> TriggerTable {
        let name = format!("fence_trigger_test_{:x}", testkit::unique_suffix());
        db.batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('tenure fencing example'));
             {} COMMIT;
             CREATE TABLE {name} (id int PRIMARY KEY, body text NOT NULL, fence_token bigint NOT NULL);
             CREATE TRIGGER {name}_fence BEFORE UPDATE ON {name}
                 FOR EACH ROW EXECUTE FUNCTION tenure_refuse_stale_fence_token();
             INSERT INTO {name} VALUES (1, 'first', 5);",
            fence::TRIGGER_FUNCTION_SQL
        ))
        .await
        .expect("create the table");
        TriggerTable { name }
    }

    async fn update(
        &self,
        db: &Client,
        body: &str,
        token: i64,
    ) -> Result<u64, tokio_postgres::Error> {
        db.execute(
            &format!(
                "UPDATE {} SET body = $1, fence_token = $2 WHERE id = 1",
                self.name
            ),
            &[&body, &token],
        )
        .await
    }

    async fn row(&self, db: &Client, id: i32) -> (String, i64) {
        let row = db
            .query_one(
                &format!("SELECT body, fence_token FROM {} WHERE id = $1", self.name),
                &[&id],
            )
            .await
            .expect("read the row");
        (row.get(0), row.get(1))
    }

    async fn drop(self, db: &Client) {
        db.batch_execute(&format!("DROP TABLE {}", self.name))
            .await
            .expect("drop the table");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trigger_admits_the_same_or_a_later_token_and_refuses_an_earlier_one() {
    let Some(url) = url() else { return };
    let db = connect(&url).await;
    let table = TriggerTable::create(&db).await;

    assert_eq!(
        table
            .update(&db, "same term again", 5)
            .await
            .expect("equal token"),
        1
    );
    assert_eq!(
        table
            .update(&db, "next term", 6)
            .await
            .expect("higher token"),
        1
    );
    let refused = table
        .update(&db, "stale", 5)
        .await
        .expect_err("lower token");
    assert_eq!(
        fence::stale_token(&refused),
        Some(StaleToken {
            token: 5,
            highest: 6
        }),
        "{refused:?}"
    );
    let text = format!("{:?}", refused.as_db_error());
    assert!(text.contains("stale fencing token 5"), "{text}");
    assert_eq!(table.row(&db, 1).await, ("next term".to_owned(), 6));

    // Any other failure is not a refusal.
    let other = db
        .execute(
            &format!("INSERT INTO {} VALUES (1, 'dup', 9)", table.name),
            &[],
        )
        .await
        .expect_err("duplicate key");
    assert_eq!(fence::stale_token(&other), None);
    table.drop(&db).await;
}

/// B's write with n+1 is in an open transaction when A's write with n
/// arrives: A's statement waits for the row lock, and once B commits both
/// recipes judge A against B's row, not the one A's statement started on.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_write_waiting_on_the_successors_row_lock_is_refused_once_it_commits() {
    let Some(url) = url() else { return };
    let setup = connect(&url).await;
    let table = TriggerTable::create(&setup).await;
    let where_clause = format!(
        "UPDATE {} SET body = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2",
        table.name
    );
    let plain = format!(
        "UPDATE {} SET body = $1, fence_token = $2 WHERE id = $3",
        table.name
    );

    for (id, recipe, stale_statement) in [(2i32, "WHERE", &where_clause), (3, "trigger", &plain)] {
        setup
            .execute(
                &format!("INSERT INTO {} VALUES ($1, 'by A', 5)", table.name),
                &[&id],
            )
            .await
            .expect("a row A wrote");
        let b = connect(&url).await;
        b.batch_execute("BEGIN").await.unwrap();
        b.execute(&plain, &[&"by B", &6i64, &id])
            .await
            .expect("B writes");

        let a = connect(&url).await;
        let a_pid: i32 = a
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let statement = stale_statement.clone();
        let late =
            tokio::spawn(async move { a.execute(&statement, &[&"by A, late", &5i64, &id]).await });
        // Wait until A's statement is blocked on B's row lock (no sleep
        // guesses: the server says so).
        let blocked = async {
            loop {
                let waiting: bool = setup
                    .query_one(
                        "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1",
                        &[&a_pid],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if waiting {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), blocked)
            .await
            .expect("A's statement waits on B's row lock");
        b.batch_execute("COMMIT").await.unwrap();

        let outcome = late.await.unwrap();
        match recipe {
            "WHERE" => assert_eq!(outcome.expect("a guarded update that matches nothing"), 0),
            _ => {
                let e = outcome.expect_err("the trigger refuses");
                assert_eq!(
                    fence::stale_token(&e),
                    Some(StaleToken {
                        token: 5,
                        highest: 6
                    })
                );
            }
        }
        assert_eq!(
            table.row(&setup, id).await,
            ("by B".to_owned(), 6),
            "{recipe}"
        );
    }
    table.drop(&setup).await;
}
