//! One password holding every URL delimiter, for the URL tests of every
//! store: taken percent-encoded, refused raw (the refusal naming the fix),
//! and never shown in an error, a `Debug` or a `describe()`.

/// A password with `/ ? # @ +` in it, each between pieces no output may
/// show.
pub const HOSTILE_PASSWORD: &str = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";

/// [`HOSTILE_PASSWORD`] as a URL must carry it (`+` stays a plus).
pub const HOSTILE_PASSWORD_ESCAPED: &str = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";

const PIECES: [&str; 6] = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];

/// Panics unless `refusal`, the error for a URL carrying
/// [`HOSTILE_PASSWORD`] raw, names the fix (`%2F`) and shows no piece of
/// the password.
pub fn assert_raw_password_refused(refusal: &str) {
    assert!(
        refusal.contains("%2F"),
        "raw, the password is refused naming the fix: {refusal}"
    );
    assert_password_never_shown(&[refusal]);
}

/// Panics if any of `shown` holds a piece of [`HOSTILE_PASSWORD`].
pub fn assert_password_never_shown(shown: &[&str]) {
    for text in shown {
        for piece in PIECES {
            assert!(!text.contains(piece), "{text}");
        }
    }
}
