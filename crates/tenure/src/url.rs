//! Helpers for store crates that read their options from a URL, so every
//! store parses and redacts the same way.

use std::time::Duration;

/// Decodes `%XX` escapes; `None` if an escape is malformed or the result is
/// not UTF-8.
///
/// ```
/// assert_eq!(tenure::url::percent_decode("p%40ss").as_deref(), Some("p@ss"));
/// assert_eq!(tenure::url::percent_decode("%zz"), None);
/// ```
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Splits and decodes a URL's user info (`user[:password]`, the part
/// before `@`): the user (possibly empty) and the password, if a `:` was
/// there. Each store then applies its own rules (which parts it requires).
///
/// ```
/// assert_eq!(tenure::url::decode_userinfo("app:p%40ss"), Ok(("app".into(), Some("p@ss".into()))));
/// assert_eq!(tenure::url::decode_userinfo(":secret"), Ok(("".into(), Some("secret".into()))));
/// assert_eq!(tenure::url::decode_userinfo("app"), Ok(("app".into(), None)));
/// assert!(tenure::url::decode_userinfo("a%zz:b").is_err());
/// ```
pub fn decode_userinfo(info: &str) -> Result<(String, Option<String>), &'static str> {
    let (user, password) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    };
    let user =
        percent_decode(user).ok_or("the user name has an invalid %-escape or is not UTF-8")?;
    let password = password
        .map(|p| percent_decode(p).ok_or("the password has an invalid %-escape or is not UTF-8"))
        .transpose()?;
    Ok((user, password))
}

/// Parses the option `name`'s value as a duration: `500ms`, `5s`, `2m`,
/// `1h 30m` (humantime's forms) or a bare number of seconds. The error
/// names the option and the forms it takes.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tenure::url::parse_duration("timeout", "250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(tenure::url::parse_duration("timeout", "3"), Ok(Duration::from_secs(3)));
/// assert!(tenure::url::parse_duration("timeout", "soon").unwrap_err().contains("timeout"));
/// ```
pub fn parse_duration(name: &str, value: &str) -> Result<Duration, String> {
    let v = value.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return v
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| format!("option {name}: {value:?} is out of range"));
    }
    humantime::parse_duration(v)
        .map_err(|_| format!("option {name}: {value:?} is not a duration such as 500ms or 5s"))
}

/// The URL with the password in its user info, and any `password=` query
/// parameter, replaced by `***`: the only form of a store URL that may be
/// logged or shown.
///
/// ```
/// assert_eq!(tenure::url::redact("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(tenure::url::redact("postgres://h/db?password=x&a=b"), "postgres://h/db?password=***&a=b");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<&str> = query
                .split('&')
                .map(|kv| {
                    if kv.starts_with("password=") {
                        "password=***"
                    } else {
                        kv
                    }
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_covers_the_forms_urls_take() {
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("etcd://u:p@a:1,b:2?x=1"), "etcd://u:***@a:1,b:2?x=1");
        assert_eq!(redact("not a url"), "not a url");
    }
}
