//! Fencing local files (docs/fencing.md): the example itself, and the
//! rules of its `FencedDir`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use tenure::fence::StaleToken;
use tenure_testkit::TempDir;

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_file`"
)]
#[path = "../examples/fencing_file.rs"]
mod example;
use example::FencedDir;

/// The example as `cargo run --example fencing_file` runs it: A's late
/// write with token n after B wrote with n+1 is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let parent = TempDir::new("fencing-file");
    tenure_testkit::story_holds(example::run(parent.path())).await;
}

fn read(dir: &TempDir, name: &str) -> String {
    std::fs::read_to_string(dir.path().join(name)).unwrap()
}

#[test]
fn the_same_or_a_later_token_writes_and_an_earlier_one_changes_nothing() {
    let dir = TempDir::new("fenced-dir");
    let files = FencedDir::new(dir.path());
    assert_eq!(
        files.write(9, "report", b"nine").unwrap(),
        Ok(()),
        "no fence yet"
    );
    assert_eq!(files.write(9, "report", b"nine again").unwrap(), Ok(()));
    assert_eq!(
        files.write(10, "report", b"ten").unwrap(),
        Ok(()),
        "10 after 9"
    );
    assert_eq!(
        files.write(9, "report", b"stale").unwrap(),
        Err(StaleToken {
            token: 9,
            highest: 10
        })
    );
    assert_eq!(
        files.write(9, "other", b"stale").unwrap(),
        Err(StaleToken {
            token: 9,
            highest: 10
        }),
        "the fence guards every file in the directory"
    );
    assert_eq!(read(&dir, "report"), "ten");
    assert_eq!(read(&dir, "fence.token"), "10\n");
    assert!(!dir.path().join("other").exists());
}

#[test]
fn a_token_file_holding_something_else_is_an_error_and_nothing_is_written() {
    let dir = TempDir::new("fenced-dir");
    std::fs::write(dir.path().join("fence.token"), "ten\n").unwrap();
    let e = FencedDir::new(dir.path())
        .write(11, "report", b"eleven")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(
        e.to_string().contains("something other than a token"),
        "{e}"
    );
    assert!(!dir.path().join("report").exists());
}

/// A writer waits for the lock: while another holds it (here the test, as
/// a stale leader between its check and its write would), nothing is
/// compared or written. The kernel's lock table says when the writer is
/// waiting; no sleep guesses.
#[test]
#[allow(unsafe_code, reason = "std has no stable call for flock(2)")]
fn a_writer_waits_while_another_holds_the_lock() {
    let dir = TempDir::new("fenced-dir");
    let lock_path = dir.path().join("fence.lock");
    let held = File::create(&lock_path).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let inode = std::fs::metadata(&lock_path).unwrap().ino();

    let files = FencedDir::new(dir.path());
    let writer = std::thread::spawn(move || files.write(3, "report", b"three").unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            !writer.is_finished(),
            "the writer wrote without waiting for the lock"
        );
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        let waiting = locks
            .lines()
            .any(|l| l.contains("->") && l.contains("FLOCK") && l.contains(&format!(":{inode} ")));
        if waiting {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never waited on the lock:\n{locks}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!dir.path().join("report").exists());
    drop(held);
    assert_eq!(writer.join().unwrap(), Ok(()));
    assert_eq!(read(&dir, "report"), "three");
}
