//! Fencing local files: a leader whose term has ended cannot overwrite its
//! successor's work.
//!
//! The leases are in an SQLite file, as for processes sharing one host; the
//! resource is a directory of files written only by [`FencedDir::write`]:
//! under an exclusive `flock` on `fence.lock`, it compares the writer's
//! token with the one in `fence.token`, raises `fence.token`, then replaces
//! the file. Leader A takes term n and writes a report; A then stalls (a GC
//! pause, a `SIGSTOP`) with a second write in flight, its term ends, and B
//! takes term n+1 and writes. A's late write with token n is refused.
//!
//! Run: `cargo run -p tenure-sqlite --example fencing_file`.
//! `tests/fencing_file.rs` runs this same code. The recipe is explained in
//! `docs/fencing.md`.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tenure::fence::{self, StaleToken};
use tenure_sqlite::SqliteStore;
use tenure_testkit::HandOver;

type Error = tenure_testkit::StoryError;

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&std::env::temp_dir()).await
}

/// A directory whose files only writers with a current token may replace.
/// Every writer, in every process, must write through this (the lock is
/// advisory), and the directory must be on a local file system (`flock`
/// over NFS is not to be trusted).
#[derive(Clone)]
pub struct FencedDir {
    dir: PathBuf,
}

impl FencedDir {
    /// Files in `dir`, which must exist.
    pub fn new(dir: impl Into<PathBuf>) -> FencedDir {
        FencedDir { dir: dir.into() }
    }

    /// Replaces file `name` with `contents` unless a writer with a higher
    /// token has written here. Blocks while another writer holds the lock.
    pub fn write(
        &self,
        token: u64,
        name: &str,
        contents: &[u8],
    ) -> io::Result<Result<(), StaleToken>> {
        // Held until `_lock` drops. The kernel releases it when the
        // holder's process dies, so a killed leader never leaves it held;
        // a stopped one does, until `tenure run`'s watchdog kills it at its
        // deadline.
        let _lock = lock(&self.dir.join("fence.lock"))?;
        let highest = self.highest()?;
        if let Err(stale) = fence::check(highest, token) {
            return Ok(Err(stale));
        }
        // Raise the fence before the write: a crash between the two leaves
        // a fence above the data, which refuses no current writer; the other
        // order would leave n+1's data under fence n, open to writer n.
        if highest != Some(token) {
            replace(&self.dir, "fence.token", format!("{token}\n").as_bytes())?;
        }
        replace(&self.dir, name, contents)?;
        Ok(Ok(()))
    }

    /// The token in `fence.token`; `None` before the first write.
    fn highest(&self) -> io::Result<Option<u64>> {
        let path = self.dir.join("fence.token");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match text.trim_end().parse() {
            Ok(token) => Ok(Some(token)),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds something other than a token: let only FencedDir write it",
                    path.display()
                ),
            )),
        }
    }
}

/// An exclusive `flock` on `path`, released when the file is closed.
#[allow(unsafe_code, reason = "std has no stable call for flock(2)")]
fn lock(path: &Path) -> io::Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Replaces `dir/name` atomically and durably: a reader (or a crash) sees
/// the old contents or the new, never a mix.
fn replace(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let temporary = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// A leader's write, off the async threads: taking the lock can block.
async fn write(
    dir: &FencedDir,
    token: u64,
    body: &'static str,
) -> Result<Result<(), StaleToken>, Error> {
    let dir = dir.clone();
    Ok(tokio::task::spawn_blocking(move || dir.write(token, "report", body.as_bytes())).await??)
}

/// Runs the story in a new directory under `parent` (removed at the end);
/// fails if the stale write is admitted, or anything else goes differently.
pub async fn run(parent: &Path) -> Result<(), Error> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let root = parent.join(format!(
        "tenure-fencing-example-{}-{nanos}",
        std::process::id()
    ));
    let data = root.join("reports");
    std::fs::create_dir_all(&data)?;
    let reports = FencedDir::new(&data);

    // Two candidates, as two processes on this host would be, each with its
    // own handle on the lease file.
    let leases = root.join("leases.db");
    let story = HandOver::start(SqliteStore::connect(&leases).await?, "reports").await?;
    let mut story = story.and_b(SqliteStore::connect(&leases).await?)?;
    story.a_wrote("", write(&reports, story.token_a(), "by A").await?)?;
    let token_b = story.a_stalls().await?;
    story.b_wrote("", write(&reports, token_b, "by B").await?)?;
    // A wakes up and its write arrives.
    let late = write(&reports, story.token_a(), "by A, late").await?;
    story.a_late_write_refused("", late)?;
    let body = std::fs::read_to_string(data.join("report"))?;
    if body != "by B" {
        return Err(format!("the report holds {body:?}, not B's write").into());
    }
    story.finish().await;
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
