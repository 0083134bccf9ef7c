//! Shared by the integration tests: scratch directories and the
//! conformance harness.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::OptionalExtension;
use tenure::GroupName;
use tenure_sqlite::SqliteStore;
use tenure_testkit::{Feeds, Harness};

/// A fresh directory under the system temp dir, removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(label: &str) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "tenure-sqlite-{label}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The conformance harness on `leases.db` in this directory.
    pub fn harness(&self) -> SqliteHarness {
        SqliteHarness {
            path: self.path("leases.db"),
        }
    }

    /// A store on `leases.db` in this directory (created on the way), and
    /// the file's path for raw access.
    pub async fn store(&self) -> (PathBuf, SqliteStore) {
        let path = self.path("leases.db");
        let store = SqliteStore::connect(&path).await.unwrap();
        (path, store)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A raw connection, as an operator's `sqlite3` shell would have.
pub fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// Every `store()` is a new `SqliteStore::connect`, so a new connection.
pub struct SqliteHarness {
    pub path: PathBuf,
}

#[async_trait]
impl Harness for SqliteHarness {
    type Store = SqliteStore;

    async fn store(&self) -> SqliteStore {
        SqliteStore::connect(&self.path).await.unwrap()
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        raw(&self.path)
            .execute(
                "INSERT INTO tenure_leases (group_name, version, record) VALUES (?1, 1, ?2)
                 ON CONFLICT (group_name) DO UPDATE SET version = version + 1, record = excluded.record",
                rusqlite::params![group.as_str(), bytes],
            )
            .unwrap();
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        raw(&self.path)
            .query_row(
                "SELECT record FROM tenure_leases WHERE group_name = ?1",
                [group.as_str()],
                |row| row.get::<_, Vec<u8>>(0),
            )
            .optional()
            .unwrap()
    }

    /// Every write notifies: the feed case fails, not skips, if that
    /// breaks.
    fn promised_feeds(&self) -> Feeds {
        Feeds::PER_GROUP
    }
}
