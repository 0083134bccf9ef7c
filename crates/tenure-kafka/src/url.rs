//! `kafka://` URLs, for the command line and configuration files:
//!
//! ```text
//! kafka://host:port[,host:port…][/TOPIC][?group=ID&heartbeat_timeout=5s&…&librdkafka.property=value]
//! ```
//!
//! The path is the leader topic; `group` is the consumer group id;
//! `heartbeat_timeout`, `min_poll_interval`, `poll_duration` and
//! `close_timeout` take [humantime] durations; `create_topic` takes
//! `true`/`false`; every other parameter is a librdkafka property. Values
//! are %-decoded. Credentials go in parameters
//! (`sasl.username=…&sasl.password=…`), never in the host part, and no
//! error message repeats a parameter's value.

use std::time::Duration;

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;

/// Parses a `kafka://` URL into a configuration (not yet validated).
pub(crate) fn parse(url: &str) -> Result<KafkaConfig, KafkaBackendError> {
    let rest = url
        .split_once("://")
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("kafka"))
        .map(|(_, rest)| rest)
        .ok_or_else(|| KafkaBackendError::url("it does not start with kafka://"))?;
    // A kafka:// URL has no user info. An '@' anywhere means credentials
    // were pasted before the host, where a password holding '/', '?' or '#'
    // would be cut into a broker, a topic and parameters that an error
    // could echo: refuse before looking at any of it.
    if rest.contains('@') {
        return Err(KafkaBackendError::url(
            "credentials cannot go before the host: pass sasl.username=…&sasl.password=… \
             (with security.protocol and sasl.mechanisms) as parameters, with any @ in them written %40",
        ));
    }
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (brokers, path) = location.split_once('/').unwrap_or((location, ""));
    if brokers.is_empty() {
        return Err(KafkaBackendError::url("no broker given"));
    }
    for broker in brokers.split(',') {
        check_broker(broker)?;
    }
    let mut config = KafkaConfig::new(brokers);
    let topic = decode(path)
        .ok_or_else(|| KafkaBackendError::url("the topic is not valid %-encoded UTF-8"))?;
    if topic.contains('/') {
        return Err(KafkaBackendError::url(format!(
            "the path {topic:?} has more than one segment: it is the leader topic"
        )));
    }
    if !topic.is_empty() {
        config.leader_topic = Some(topic);
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        // A word without '=' is most likely the tail of a secret holding
        // an unescaped '&': refused without repeating it.
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| KafkaBackendError::url(tenure::store::url::BARE_WORD))?;
        let key = decode(key).ok_or_else(|| {
            KafkaBackendError::url("a parameter name is not valid %-encoded UTF-8")
        })?;
        let value = decode(value).ok_or_else(|| {
            KafkaBackendError::url(format!("the value of {key} is not valid %-encoded UTF-8"))
        })?;
        match key.as_str() {
            "group" => config.group_id = Some(value),
            "heartbeat_timeout" => config.heartbeat_timeout = duration(&key, &value)?,
            "min_poll_interval" => config.min_poll_interval = duration(&key, &value)?,
            "poll_duration" => config.poll_duration = duration(&key, &value)?,
            "close_timeout" => config.close_timeout = duration(&key, &value)?,
            "create_topic" => {
                config.create_topic =
                    tenure::store::url::parse_bool(&key, &value).map_err(KafkaBackendError::url)?
            }
            _ => {
                config.properties.insert(key, value);
            }
        }
    }
    Ok(config)
}

fn check_broker(broker: &str) -> Result<(), KafkaBackendError> {
    let bad = || {
        KafkaBackendError::url(format!(
            "broker {broker:?} is not host:port (an IPv6 address goes in brackets: [::1]:9092)"
        ))
    };
    let (host, port) = broker.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad());
    }
    Ok(())
}

fn duration(key: &str, value: &str) -> Result<Duration, KafkaBackendError> {
    tenure::store::url::parse_duration(key, value).map_err(KafkaBackendError::url)
}

/// %-decodes `s` (a `+` stays a plus); `None` if an escape is malformed or
/// the result is not UTF-8.
fn decode(s: &str) -> Option<String> {
    tenure::store::url::percent_decode(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_url() {
        let c = parse(
            "kafka://10.0.0.5:9092,[::1]:9093/billing.neli?group=billing-g&heartbeat_timeout=2s\
             &min_poll_interval=50ms&poll_duration=2ms&close_timeout=3s&create_topic=false\
             &security.protocol=sasl_plaintext&sasl.password=p%26ss",
        )
        .unwrap();
        assert_eq!(c.brokers, "10.0.0.5:9092,[::1]:9093");
        assert_eq!(c.leader_topic.as_deref(), Some("billing.neli"));
        assert_eq!(c.group_id.as_deref(), Some("billing-g"));
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(2));
        assert_eq!(c.min_poll_interval, Duration::from_millis(50));
        assert_eq!(c.poll_duration, Duration::from_millis(2));
        assert_eq!(c.close_timeout, Duration::from_secs(3));
        assert!(!c.create_topic);
        assert_eq!(c.properties["security.protocol"], "sasl_plaintext");
        assert_eq!(c.properties["sasl.password"], "p&ss");
    }

    #[test]
    fn minimal_url_takes_the_defaults() {
        let c = parse("kafka://127.0.0.1:9092").unwrap();
        assert_eq!(c, KafkaConfig::new("127.0.0.1:9092"));
        let c = parse("KAFKA://127.0.0.1:9092/").unwrap();
        assert_eq!(c.leader_topic, None);
    }

    #[test]
    fn bad_urls_are_refused_without_repeating_secrets() {
        let err = |u: &str| parse(u).unwrap_err().to_string();
        assert!(err("redis://x:1").contains("kafka://"));
        assert!(err("kafka:///t").contains("no broker"));
        assert!(err("kafka://host/t").contains("host:port"));
        assert!(err("kafka://host:99999/t").contains("host:port"));
        assert!(err("kafka://::1:9092/t").contains("brackets"));
        let e = err("kafka://user:hunter2@host:9092/t");
        assert!(e.contains("sasl.username") && !e.contains("hunter2"), "{e}");
        // A password holding '/', '?' or '#' is not cut into pieces that an
        // error could show.
        let e = err("kafka://user:Qa1/Qb2?Qc3#Qd4@Qe5+Qf6@host:9092/t");
        assert!(e.contains("sasl.username"), "{e}");
        for p in ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"] {
            assert!(!e.contains(p), "{e}");
        }
        let c = parse("kafka://h:1/t?sasl.password=Qa1/Qb2?Qc3%23Qd4%40Qe5+Qf6").unwrap();
        assert_eq!(
            c.properties["sasl.password"], "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6",
            "+ stays a plus"
        );
        assert!(err("kafka://h:1/a/b").contains("one segment"));
        assert!(err("kafka://h:1/t?group").contains("name=value"));
        // The tail of a password holding a raw '&' is refused, never shown.
        let e = err("kafka://h:1/t?sasl.password=Qa1&Qb2&group=g");
        assert!(e.contains("%26") && !e.contains("Qb2"), "{e}");
        assert!(err("kafka://h:1/t?heartbeat_timeout=soon").contains("not a duration"));
        assert!(err("kafka://h:1/t?create_topic=maybe").contains("true or false"));
        let e = err("kafka://h:1/t?sasl.password=%zz");
        assert!(
            e.contains("sasl.password") && e.contains("%-encoded"),
            "{e}"
        );
    }
}
