//! Bad files and bad rows give typed errors that name the path and the fix;
//! nothing panics and nothing is overwritten.

mod common;

use std::time::{Duration, Instant};

use common::{raw, Scratch};
use rusqlite::types::Value;
use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, RecordError, StoreError};
use tenure_sqlite::{SqliteOptions, SqliteStore, SqliteStoreError, SCHEMA_VERSION};
use tenure_testkit::{assert_misconfigured, held_by, unique_group};

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused() {
    let scratch = Scratch::new("not-a-db");
    let path = scratch.path("notes.txt");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    assert!(
        matches!(err, SqliteStoreError::NotADatabase { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("not a SQLite database") && msg.contains("move this file away"),
        "{msg}"
    );
    assert_eq!(err.path(), path);
    assert!(!err.is_transient());
    // The file is left exactly as it was.
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
    // As a StoreError it is a misconfiguration, not a transient failure.
    let store_err = StoreError::from(err);
    assert!(
        matches!(store_err, StoreError::Misconfigured { .. }),
        "{store_err}"
    );
}

#[tokio::test]
async fn a_corrupt_database_is_refused() {
    let scratch = Scratch::new("corrupt");
    let path = scratch.path("leases.db");
    {
        let store = SqliteStore::connect(&path).await.unwrap();
        for i in 0..200 {
            let g = unique_group(&format!("g{i}"));
            store
                .compare_and_swap(&g, None, &held_by("a", 1))
                .await
                .unwrap();
        }
    }
    // Fold the WAL into the main file, then damage every page after the
    // header page (the header still says "SQLite format 3").
    raw(&path)
        .pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.len() > 8192,
        "the test database is too small to damage"
    );
    for b in &mut bytes[4096..] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let _ = std::fs::remove_file(format!("{}-shm", path.display()));

    let err = match SqliteStore::connect(&path).await {
        Err(e) => e,
        Ok(store) => {
            // SQLite may only notice when it reads a damaged page.
            let e = store.read(&unique_group("x")).await.unwrap_err();
            panic!("opened a corrupt database; its first read failed with {e}")
        }
    };
    assert!(
        matches!(
            err,
            SqliteStoreError::Corrupt { .. } | SqliteStoreError::NotADatabase { .. }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    eprintln!("{msg}");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let scratch = Scratch::new("newer-schema");
    let path = scratch.path("leases.db");
    drop(SqliteStore::connect(&path).await.unwrap());
    raw(&path)
        .execute(
            "UPDATE tenure_schema SET version = ?1",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    match &err {
        SqliteStoreError::NewerSchema {
            found, supported, ..
        } => {
            assert_eq!(*found, SCHEMA_VERSION + 1);
            assert_eq!(*supported, SCHEMA_VERSION);
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("upgrade tenure") && msg.contains(&path.display().to_string()),
        "{msg}"
    );
}

#[tokio::test]
async fn foreign_tables_and_broken_schema_rows_are_refused() {
    let scratch = Scratch::new("foreign-tables");
    // A file another program made with a table named like ours.
    let path = scratch.path("other.db");
    raw(&path)
        .execute_batch("CREATE TABLE tenure_leases (id INTEGER PRIMARY KEY, owner TEXT);")
        .unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    assert!(matches!(err, SqliteStoreError::Schema { .. }), "{err:?}");

    // A schema table without its version row.
    let path = scratch.path("no-row.db");
    drop(SqliteStore::connect(&path).await.unwrap());
    raw(&path).execute("DELETE FROM tenure_schema", []).unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    assert!(matches!(err, SqliteStoreError::Schema { .. }), "{err:?}");
    assert!(err.to_string().contains("no version row"), "{err}");
}

#[tokio::test]
async fn a_dropped_table_is_a_misconfiguration() {
    let scratch = Scratch::new("dropped");
    let (path, store) = scratch.store().await;
    raw(&path)
        .execute_batch("DROP TABLE tenure_leases;")
        .unwrap();
    let g = unique_group("g");
    let err = store.read(&g).await.unwrap_err();
    assert_misconfigured(&err, "missing or altered");
    let err = store
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Misconfigured { .. }), "{err}");
}

#[tokio::test]
async fn bad_paths_are_refused() {
    let err = SqliteStore::connect("").await.unwrap_err();
    assert!(
        matches!(err, SqliteStoreError::InvalidPath { .. }),
        "{err:?}"
    );
    let err = SqliteStore::connect(":memory:").await.unwrap_err();
    assert!(
        matches!(err, SqliteStoreError::InvalidPath { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("no other candidate"), "{err}");

    let scratch = Scratch::new("bad-paths");
    let missing = scratch.path("no/such/dir/leases.db");
    let err = SqliteStore::connect(&missing).await.unwrap_err();
    assert!(
        matches!(err, SqliteStoreError::CannotOpen { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("directory exists"), "{err}");

    // A directory where the file should be.
    let err = SqliteStore::connect(&scratch.dir).await.unwrap_err();
    assert!(
        matches!(
            err,
            SqliteStoreError::CannotOpen { .. } | SqliteStoreError::Io { .. }
        ),
        "{err:?}"
    );
}

/// Rows written by hand: a record stored as text still decodes; a record
/// or version of the wrong type is a typed record error, not a panic.
#[tokio::test]
async fn hand_edited_rows_are_typed_errors() {
    let scratch = Scratch::new("hand-edited");
    let (path, store) = scratch.store().await;

    let text = String::from_utf8(held_by("a", 4).encode()).unwrap();
    let g = plant_row(&path, "text", Value::Integer(1), Value::Text(text));
    let got = store.read(&g).await.unwrap().unwrap();
    assert_eq!(got.record.token, 4);

    let g = plant_row(
        &path,
        "integer-record",
        Value::Integer(1),
        Value::Integer(42),
    );
    let err = record_error(store.read(&g).await.unwrap_err());
    assert!(matches!(err, RecordError::Foreign { .. }), "{err}");

    let record = || Value::Blob(held_by("a", 1).encode());
    let g = plant_row(&path, "text-version", Value::Text("seven".into()), record());
    let err = record_error(store.read(&g).await.unwrap_err());
    assert!(matches!(err, RecordError::Corrupt { .. }), "{err}");
    let err = store
        .compare_and_swap(&g, Some(tenure::Version(7)), &held_by("a", 2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Record { .. }), "{err}");

    let g = plant_row(&path, "negative-version", Value::Integer(-3), record());
    let err = store.read(&g).await.unwrap_err();
    assert!(matches!(err, StoreError::Record { .. }), "{err}");
}

/// The record error `err` carries; panics if it is another kind of error.
fn record_error(err: StoreError) -> RecordError {
    match err {
        StoreError::Record { source, .. } => source,
        other => panic!("expected a record error, got {other}"),
    }
}

/// Plants a row by hand in the database at `path`, for a fresh group named
/// after `label`: `version` and `record` as SQLite will hold them, of
/// whatever type.
fn plant_row(path: &std::path::Path, label: &str, version: Value, record: Value) -> GroupName {
    let g = unique_group(label);
    raw(path)
        .execute(
            "INSERT INTO tenure_leases (group_name, version, record) VALUES (?1, ?2, ?3)",
            rusqlite::params![g.as_str(), version, record],
        )
        .unwrap();
    g
}

/// A writer that holds the lock is waited for within the busy timeout;
/// past it the store answers with a transient error naming the lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_database_is_retried_then_reported() {
    let scratch = Scratch::new("locked");
    let path = scratch.path("leases.db");
    let options = SqliteOptions::default().with_busy_timeout(Duration::from_millis(300));
    let store = SqliteStore::connect_with(&path, options).await.unwrap();
    let g = unique_group("g");
    let v1 = tenure_testkit::applied(&store, &g, None, &held_by("a", 1)).await;

    // Another process's long write transaction.
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<Duration>();
    let holder_path = path.clone();
    let holder = std::thread::spawn(move || {
        let mut conn = raw(&holder_path);
        for hold in release_rx {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(hold);
            tx.commit().unwrap();
        }
    });

    // The other process takes the lock for `hold`.
    let lock_for = |hold: Duration| {
        release_tx.send(hold).unwrap();
        locked_rx.recv().unwrap();
    };
    let record = held_by("a", 1);
    let renew = || store.compare_and_swap(&g, Some(v1), &record);

    // Held for longer than the busy timeout: a clear, transient error.
    lock_for(Duration::from_millis(1500));
    let started = Instant::now();
    let err = renew().await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.is_transient());
    assert!(err.to_string().contains("locked"), "{err}");
    assert!(
        waited >= Duration::from_millis(250),
        "gave up after {waited:?}"
    );
    eprintln!("after {waited:?}: {err}");
    // In WAL mode reads do not wait for the writer, which holds its lock
    // for 1.5 s more: a read that waited would take longer than a second.
    let started = Instant::now();
    assert_eq!(store.read(&g).await.unwrap().unwrap().version, v1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the read waited {:?} for the writer",
        started.elapsed()
    );
    // Let the holder finish, then hold briefly: the write waits and applies.
    std::thread::sleep(Duration::from_millis(1600).saturating_sub(started.elapsed()));
    lock_for(Duration::from_millis(100));
    let started = Instant::now();
    let outcome = renew().await.unwrap();
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    eprintln!("waited {:?} for a 100 ms lock", started.elapsed());
    drop(release_tx);
    holder.join().unwrap();
}

/// An operator edits a record by hand without touching the version: the
/// schema's trigger bumps it, so a candidate still holding the old version
/// cannot overwrite a record tenure did not write.
#[tokio::test]
async fn a_hand_edit_changes_the_version() {
    let scratch = Scratch::new("hand-edit");
    let (path, store) = scratch.store().await;
    let g = unique_group("g");
    let v1 = tenure_testkit::applied(&store, &g, None, &held_by("a", 1)).await;
    raw(&path)
        .execute(
            "UPDATE tenure_leases SET record = ?2 WHERE group_name = ?1",
            rusqlite::params![g.as_str(), b"maintenance: do not run".to_vec()],
        )
        .unwrap();
    let outcome = store
        .compare_and_swap(&g, Some(v1), &held_by("a", 1))
        .await
        .unwrap();
    assert_eq!(outcome, CasOutcome::Conflict);
    let err = record_error(store.read(&g).await.unwrap_err());
    assert!(matches!(err, RecordError::Foreign { .. }), "{err}");
    // The store's own writes still advance the version by exactly one.
    let raw_version = |path: &std::path::Path| -> i64 {
        raw(path)
            .query_row(
                "SELECT version FROM tenure_leases WHERE group_name = ?1",
                [g.as_str()],
                |row| row.get(0),
            )
            .unwrap()
    };
    let before = raw_version(&path);
    assert_eq!(before, 2);
    let CasOutcome::Applied(v3) = store
        .compare_and_swap(&g, Some(tenure::Version(2)), &held_by("b", 2))
        .await
        .unwrap()
    else {
        panic!("a write with the current version conflicted")
    };
    assert_eq!(v3, tenure::Version(3));
}
