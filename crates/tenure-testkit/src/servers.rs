//! Finding the real servers that store tests run against.

/// The URL of a real server for a test, from the environment variable `var`
/// (set by `scripts/servers.sh`).
///
/// When the variable is missing the test cannot run: under `CI=true` that is
/// a failure (this panics, naming the variable and the script that sets
/// it); elsewhere the test is skipped with a line on stderr and `None` is
/// returned.
///
/// ```no_run
/// # async fn t() {
/// let Some(url) = tenure_testkit::server_url("TENURE_TEST_POSTGRES") else { return };
/// # let _ = url; }
/// ```
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "{var} is not set but CI=true: the real server this test needs is missing; run the tests through scripts/test.sh, which starts it (scripts/servers.sh)");
            eprintln!("skipped: {var} is not set; start the servers with `bash scripts/servers.sh start` and export its env file");
            None
        }
    }
}
