//! One password holding every URL delimiter, for the URL tests of every
//! store: taken percent-encoded, refused raw (the refusal naming the fix),
//! and never shown in an error, a `Debug` or a `describe()`.

use tenure::store::LeaseView;

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

/// Panics unless `store`, opened from a URL that carried a secret, shows
/// itself without it: its `describe()` begins with `shown` (the scheme,
/// user and host), and neither `describe()` nor its `Debug` holds any of
/// `secret_pieces`.
pub fn assert_store_shown_without_secret<S: LeaseView + std::fmt::Debug>(
    store: &S,
    shown: &str,
    secret_pieces: &[&str],
) {
    let described = store.describe();
    assert!(
        described.starts_with(shown),
        "describe() is {described:?}, expected it to begin with {shown:?}"
    );
    for (what, text) in [("describe", described), ("Debug", format!("{store:?}"))] {
        for piece in secret_pieces {
            assert!(
                !text.contains(piece),
                "{what} shows the secret or a piece of it: {text}"
            );
        }
    }
}

/// The password the bad URLs of [`assert_url_refusals`] carry.
pub const REFUSED_URL_PASSWORD: &str = "pw-secret";

/// Panics unless `parse` refuses every URL of `cases` with an error that
/// holds its needle (the part of the URL it names) and not
/// [`REFUSED_URL_PASSWORD`], the password the cases write in them.
///
/// ```
/// # use tenure_testkit::assert_url_refusals;
/// let parse = |url: &str| match url.strip_prefix("x://") {
///     Some(_) => Ok(()),
///     None => Err("the scheme must be x://".to_owned()),
/// };
/// assert_url_refusals(parse, &[("y://u:pw-secret@h", "scheme")]);
/// ```
pub fn assert_url_refusals<T, E: std::fmt::Display>(
    parse: impl Fn(&str) -> Result<T, E>,
    cases: &[(&str, &str)],
) {
    for (url, needle) in cases {
        let Err(e) = parse(url) else {
            panic!("{url}: accepted, expected an error naming {needle:?}");
        };
        let e = e.to_string();
        assert!(e.contains(needle), "{url}: {e}");
        assert!(!e.contains(REFUSED_URL_PASSWORD), "{url}: {e}");
    }
}

/// Parses `url`, which writes `{P}` where the password goes, twice: with
/// [`HOSTILE_PASSWORD_ESCAPED`], which must give options whose password
/// (as `password` reads it) is [`HOSTILE_PASSWORD`], a `+` staying a plus,
/// and whose `Debug` and `shown` text hold no piece of it; and with the
/// password raw, which must be refused naming the fix. Returns the parsed
/// options for the store's own checks.
pub fn assert_hostile_password_handled<O: std::fmt::Debug, E: std::fmt::Display>(
    parse: impl Fn(&str) -> Result<O, E>,
    url: &str,
    password: impl Fn(&O) -> Option<&str>,
    shown: impl Fn(&O) -> String,
) -> O {
    let options = match parse(&url.replace("{P}", HOSTILE_PASSWORD_ESCAPED)) {
        Ok(options) => options,
        Err(e) => panic!("the escaped password is refused: {e}"),
    };
    assert_eq!(password(&options), Some(HOSTILE_PASSWORD), "+ stays a plus");
    let Err(refusal) = parse(&url.replace("{P}", HOSTILE_PASSWORD)) else {
        panic!("a raw / ? # in the password is accepted");
    };
    assert_raw_password_refused(&refusal.to_string());
    assert_password_never_shown(&[&format!("{options:?}"), &shown(&options)]);
    options
}
