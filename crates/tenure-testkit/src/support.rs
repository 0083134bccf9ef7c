//! Plumbing for tests that start their own servers.

use std::path::{Path, PathBuf};

/// A free TCP port on loopback (another process could take it before it is
/// used; fine for tests that start a server on it at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Sends `sig` to process `pid` (a server or command a test started), or,
/// for a negative `pid`, to every process of group `-pid`; std can only
/// SIGKILL a child. Ids that would reach every process (-1) or the test's
/// own group (0) are refused with `EINVAL`.
#[allow(unsafe_code, reason = "std has no call to send a signal")]
pub fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    if pid == 0 || pid == -1 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A server process a test started itself (to kill, freeze or restart it):
/// SIGKILLed and reaped when stopped, replaced or dropped.
#[derive(Debug, Default)]
pub struct ServerProcess(Option<std::process::Child>);

impl ServerProcess {
    /// Runs `cmd` as the server, stopping the one before if any.
    pub fn start(&mut self, cmd: &mut std::process::Command) -> std::io::Result<()> {
        self.kill();
        self.0 = Some(cmd.spawn()?);
        Ok(())
    }

    /// SIGKILL, then reaps it; nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How it ended, if it has exited (it is then reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.0.as_ref().and_then(|c| i32::try_from(c.id()).ok())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `what` accepts connections on `127.0.0.1:port`, without
/// blocking the runtime (for a server a test restarts while electors run
/// on it); panics naming `what` after `within`.
pub async fn wait_for_listener(what: &str, port: u16, within: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{what} did not listen on {port} within {within:?}");
}

/// A random suffix for names that must not collide between test runs.
pub fn unique_suffix() -> u64 {
    rand::random()
}

/// A throwaway directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `tenure-<label>-<pid>-<random>` in the system's temp dir.
    pub fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tenure-{label}-{}-{:x}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
