//! Fencing a MySQL table (docs/fencing.md), against the real server: the
//! example itself, and the trigger's rule under concurrent writers.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tenure::fence::StaleToken;
use tenure_mysql::fence;
use tenure_testkit as testkit;

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_mysql`"
)]
#[path = "../examples/fencing_mysql.rs"]
mod example;

fn url() -> Option<String> {
    testkit::server_url("TENURE_TEST_MYSQL")
}

async fn connect(url: &str) -> Conn {
    example::connect(url).await.expect("connect")
}

/// The example as `cargo run --example fencing_mysql` runs it: A's late
/// write with token n after B wrote with n+1 is refused by both recipes.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let Some(url) = url() else { return };
    testkit::story_holds(example::run(&url)).await;
}

/// A table of its own with the trigger, dropped at the end.
struct TriggerTable {
    name: String,
}

impl TriggerTable {
    async fn create(db: &mut Conn) -> TriggerTable {
        let name = format!("fence_trigger_test_{:x}", testkit::unique_suffix());
        db.query_drop(format!(
            "CREATE TABLE {name} (id INT PRIMARY KEY, body TEXT NOT NULL, fence_token BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB"
        ))
        .await
        .expect("create the table");
        db.query_drop(fence::trigger_sql(&name))
            .await
            .expect("create the trigger");
        db.query_drop(format!("INSERT INTO {name} VALUES (1, 'first', 5)"))
            .await
            .unwrap();
        TriggerTable { name }
    }

    async fn update(
        &self,
        db: &mut Conn,
        body: &str,
        token: u64,
    ) -> Result<u64, mysql_async::Error> {
        db.exec_drop(
            format!(
                "UPDATE {} SET body = ?, fence_token = ? WHERE id = 1",
                self.name
            ),
            (body, token),
        )
        .await?;
        Ok(db.affected_rows())
    }

    async fn row(&self, db: &mut Conn, id: i32) -> (String, u64) {
        db.exec_first(
            format!("SELECT body, fence_token FROM {} WHERE id = ?", self.name),
            (id,),
        )
        .await
        .expect("read the row")
        .expect("the row is there")
    }

    async fn drop(self, db: &mut Conn) {
        db.query_drop(format!("DROP TABLE {}", self.name))
            .await
            .expect("drop the table");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trigger_admits_the_same_or_a_later_token_and_refuses_an_earlier_one() {
    let Some(url) = url() else { return };
    let mut db = connect(&url).await;
    let table = TriggerTable::create(&mut db).await;
    assert_eq!(
        table
            .update(&mut db, "same term again", 5)
            .await
            .expect("equal token"),
        1
    );
    assert_eq!(
        table
            .update(&mut db, "next term", 6)
            .await
            .expect("higher token"),
        1
    );
    let refused = table
        .update(&mut db, "stale", 5)
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
    assert_eq!(table.row(&mut db, 1).await, ("next term".to_owned(), 6));
    // The largest token a term can carry is admitted and compared right.
    assert_eq!(
        table
            .update(&mut db, "last", u64::MAX)
            .await
            .expect("u64::MAX"),
        1
    );
    let refused = table
        .update(&mut db, "stale", u64::MAX - 1)
        .await
        .expect_err("below u64::MAX");
    assert_eq!(
        fence::stale_token(&refused),
        Some(StaleToken {
            token: u64::MAX - 1,
            highest: u64::MAX
        })
    );
    // Any other failure is not a refusal.
    let other = db
        .query_drop(format!("INSERT INTO {} VALUES (1, 'dup', 9)", table.name))
        .await
        .expect_err("duplicate key");
    assert_eq!(fence::stale_token(&other), None);
    table.drop(&mut db).await;
}

/// B's write with n+1 is in an open transaction when A's write with n
/// arrives: A's statement waits for the row lock, and once B commits both
/// recipes judge A against B's row, not the one A's statement started on.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_write_waiting_on_the_successors_row_lock_is_refused_once_it_commits() {
    let Some(url) = url() else { return };
    let mut setup = connect(&url).await;
    let table = TriggerTable::create(&mut setup).await;
    let where_clause = format!(
        "UPDATE {} SET body = ?, fence_token = ? WHERE id = ? AND fence_token <= ?",
        table.name
    );
    let plain = format!(
        "UPDATE {} SET body = ?, fence_token = ? WHERE id = ?",
        table.name
    );
    for (id, recipe) in [(2i32, "WHERE"), (3, "trigger")] {
        setup
            .exec_drop(
                format!("INSERT INTO {} VALUES (?, 'by A', 5)", table.name),
                (id,),
            )
            .await
            .expect("a row A wrote");
        let mut b = connect(&url).await;
        b.query_drop("START TRANSACTION").await.unwrap();
        b.exec_drop(&plain, ("by B", 6u64, id))
            .await
            .expect("B writes");

        let mut a = connect(&url).await;
        let statement = if recipe == "WHERE" {
            where_clause.clone()
        } else {
            plain.clone()
        };
        let late = tokio::spawn(async move {
            let r = if recipe == "WHERE" {
                a.exec_drop(statement, ("by A, late", 5u64, id, 5u64)).await
            } else {
                a.exec_drop(statement, ("by A, late", 5u64, id)).await
            };
            r.map(|()| a.affected_rows())
        });
        // Wait until A's statement is running on the server, where it
        // cannot finish while B holds the row (the server says so; no
        // sleep guesses). The process list, not innodb_trx: MariaDB 10.11
        // does not always list a statement waiting inside a trigger's
        // table as a transaction in LOCK WAIT.
        let blocked = async {
            loop {
                // A's statement, in the table of this test's own, waiting.
                let waiting: Option<i64> = setup
                    .exec_first(
                        "SELECT COUNT(*) FROM information_schema.processlist
                         WHERE id <> CONNECTION_ID() AND info LIKE ?",
                        (format!("UPDATE {}%", table.name),),
                    )
                    .await
                    .unwrap();
                if waiting == Some(1) {
                    break;
                }

                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), blocked)
            .await
            .expect("A's statement waits on B's row lock");
        b.query_drop("COMMIT").await.unwrap();
        let outcome = late.await.unwrap();
        if recipe == "WHERE" {
            assert_eq!(outcome.expect("a guarded update that matches nothing"), 0);
        } else {
            let e = outcome.expect_err("the trigger refuses");
            assert_eq!(
                fence::stale_token(&e),
                Some(StaleToken {
                    token: 5,
                    highest: 6
                })
            );
        }
        assert_eq!(
            table.row(&mut setup, id).await,
            ("by B".to_owned(), 6),
            "{recipe}"
        );
    }
    table.drop(&mut setup).await;
}
