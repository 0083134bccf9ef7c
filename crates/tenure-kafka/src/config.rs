//! What a Kafka candidate is configured with: goneli's settings and
//! defaults, the librdkafka properties derived from them, and validation.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;

use crate::error::KafkaBackendError;
use crate::heartbeat::MAX_TIMEOUT;

/// goneli's default minimum interval between two polls of the consumer.
pub const DEFAULT_MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// goneli's default time one poll of the consumer may block.
pub const DEFAULT_POLL_DURATION: Duration = Duration::from_millis(1);
/// goneli's default heartbeat timeout.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long closing the clients may take before they are abandoned
/// (goneli's 10 s, its work-around for confluent-kafka-go #463).
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The brokers when none are given (goneli's default).
pub const DEFAULT_BROKERS: &str = "localhost:9092";

/// The longest topic name Kafka accepts.
const MAX_TOPIC_LEN: usize = 249;

/// Properties this crate sets itself, with the setting that controls each:
/// a user value that differs is an error rather than silently overridden
/// (goneli overwrites them), because each one is part of the safety
/// argument.
const MANAGED: &[(&str, &str)] = &[
    ("bootstrap.servers", "the brokers given to KafkaConfig::new"),
    ("group.id", "KafkaConfig::group_id"),
    ("enable.auto.commit", "nothing: offsets are never committed"),
    (
        "session.timeout.ms",
        "KafkaConfig::heartbeat_timeout (it is 3 × the heartbeat timeout)",
    ),
    (
        "delivery.timeout.ms",
        "KafkaConfig::heartbeat_timeout (a heartbeat older than that is useless)",
    ),
    (
        "linger.ms",
        "nothing: heartbeats are sent at once (linger.ms = 0)",
    ),
    (
        "enable.partition.eof",
        "nothing: end-of-partition events are not used",
    ),
    (
        "statistics.interval.ms",
        "KafkaConfig::heartbeat_timeout (the group consumer's statistics, a tenth of it, are the \
         evidence of group membership that bounds a leader's term)",
    ),
    (
        "group.protocol",
        "nothing: NELI needs the classic consumer group protocol (group.protocol=classic), whose \
         session timeout it sets",
    ),
    (
        "allow.auto.create.topics",
        "nothing: a heartbeat must never create the leader topic anew (tokens would restart); \
         KafkaConfig::create_topic creates it once, with one partition",
    ),
    (
        "acks",
        "nothing: a heartbeat counts only once every in-sync replica has it (acks=all)",
    ),
    (
        "request.required.acks",
        "nothing: a heartbeat counts only once every in-sync replica has it (acks=all)",
    ),
];

/// Properties a candidate cannot run with, and why.
const FORBIDDEN: &[(&str, &str)] = &[(
    "group.instance.id",
    "static membership is not supported: a static member that rejoins gets its old assignment \
     without waiting out its session, and never leaves the group on close, which breaks the \
     fence and the hand-over; remove group.instance.id",
)];

/// The shortest `heartbeat.interval.ms` that fits, in heartbeat timeouts:
/// the group coordinator must hear from a live leader well within the
/// session (3 heartbeat timeouts), and a cut-off leader is fenced after
/// one, so the interval must stay well below 1.8 of them.
const MAX_GROUP_HEARTBEAT_INTERVAL: f64 = 1.5;

/// The settings of a Kafka candidate, with goneli's defaults.
///
/// The candidate's name is the elector's
/// [`candidate_id`](tenure::ElectorBuilder::candidate_id); goneli's
/// `Pulse` coupling is the elector's
/// [`liveness_timeout`](tenure::ElectorBuilder::liveness_timeout), which
/// becomes `max.poll.interval.ms`.
///
/// ```
/// use std::time::Duration;
/// use tenure_kafka::KafkaConfig;
///
/// let config = KafkaConfig {
///     leader_topic: Some("billing.neli".into()),
///     heartbeat_timeout: Duration::from_secs(5),
///     ..KafkaConfig::new("10.0.0.5:9092,10.0.0.6:9092")
/// }
/// .property("security.protocol", "plaintext");
/// assert!(config.validate().is_ok());
/// let props = config.consumer_properties("billing");
/// assert_eq!(props["session.timeout.ms"], "15000");
/// assert_eq!(props["group.id"], "billing");
/// ```
#[derive(Clone, PartialEq)]
pub struct KafkaConfig {
    /// The brokers, `host:port[,host:port…]` (librdkafka's
    /// `bootstrap.servers`; default `localhost:9092` as in goneli).
    pub brokers: String,
    /// The leader topic (default: the consumer group id followed by
    /// `.neli`, as goneli does). Its partition 0 is what the leader is
    /// assigned; it should have exactly one partition.
    pub leader_topic: Option<String>,
    /// The consumer group id the candidates join (default: the tenure group
    /// name with every character outside `[a-zA-Z0-9._-]` replaced by `_`,
    /// as goneli sanitises its default).
    pub group_id: Option<String>,
    /// The least time between two polls of the consumer (default 100 ms):
    /// network I/O happens at most this often, however often the
    /// application pulses.
    pub min_poll_interval: Duration,
    /// How long one poll of the consumer may block (default 1 ms).
    pub poll_duration: Duration,
    /// How long the leader waits for one of its heartbeats to come back
    /// before it is fenced (default 5 s). `session.timeout.ms` is three
    /// times this, `delivery.timeout.ms` equals it.
    pub heartbeat_timeout: Duration,
    /// How long closing the Kafka clients may take on shutdown before they
    /// are abandoned on their thread (default 10 s).
    pub close_timeout: Duration,
    /// Whether to create the leader topic with one partition when it does
    /// not exist (default `true`). Turn it off where the client may not
    /// create topics; then create it yourself with one partition.
    pub create_topic: bool,
    /// Any other librdkafka property (`security.protocol`,
    /// `sasl.mechanisms`, `client.id`, `max.poll.interval.ms`, …), passed to
    /// every client this crate creates.
    pub properties: BTreeMap<String, String>,
}

/// Property values that may be secrets are printed as `***`.
impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let props: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "***" } else { v.as_str() }))
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("leader_topic", &self.leader_topic)
            .field("group_id", &self.group_id)
            .field("min_poll_interval", &self.min_poll_interval)
            .field("poll_duration", &self.poll_duration)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("close_timeout", &self.close_timeout)
            .field("create_topic", &self.create_topic)
            .field("properties", &props)
            .finish()
    }
}

fn is_secret(key: &str) -> bool {
    // tenure's list (password, secret, token, key, credential, auth: the
    // OAUTHBEARER settings…), and JAAS configurations, which hold passwords.
    tenure::store::url::is_secret_key(key) || key.to_ascii_lowercase().contains("jaas")
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig::new(DEFAULT_BROKERS)
    }
}

impl KafkaConfig {
    /// Settings for the brokers `brokers`, everything else at goneli's
    /// defaults.
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            leader_topic: None,
            group_id: None,
            min_poll_interval: DEFAULT_MIN_POLL_INTERVAL,
            poll_duration: DEFAULT_POLL_DURATION,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            create_topic: true,
            properties: BTreeMap::new(),
        }
    }

    /// Adds a librdkafka property to [`properties`](KafkaConfig::properties).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The `session.timeout.ms` in force: three heartbeat timeouts, so a
    /// leader cut off from the brokers is fenced well before its session
    /// can expire and the partition move on.
    pub fn session_timeout(&self) -> Duration {
        self.heartbeat_timeout * 3
    }

    /// The consumer group id for tenure group `group`.
    pub fn resolved_group_id(&self, group: &str) -> String {
        match &self.group_id {
            Some(id) => id.clone(),
            None => {
                // Leave room for the ".neli" suffix of the derived topic.
                let mut id = sanitise(group);
                id.truncate(MAX_TOPIC_LEN - ".neli".len());
                if id.is_empty() || id == "." || id == ".." {
                    id = format!("_{id}");
                }
                id
            }
        }
    }

    /// The leader topic for tenure group `group`.
    pub fn resolved_topic(&self, group: &str) -> String {
        match &self.leader_topic {
            Some(t) => t.clone(),
            None => format!("{}.neli", self.resolved_group_id(group)),
        }
    }

    /// Checks every setting; the derived names are valid by construction.
    ///
    /// Rules: the brokers are not empty; an explicit topic or group id uses
    /// only Kafka's name characters `[a-zA-Z0-9._-]` (a topic at most 249 of
    /// them, and neither `.` nor `..`); the poll duration, minimum poll
    /// interval, heartbeat timeout and close timeout are at least 1 ms; the
    /// minimum poll interval is below the heartbeat timeout (or heartbeats
    /// could not return in time); no passed-through property contradicts a
    /// managed one; librdkafka accepts every property.
    pub fn validate(&self) -> Result<(), KafkaBackendError> {
        if self.brokers.trim().is_empty() {
            return Err(KafkaBackendError::config(
                "no brokers given: pass host:port[,host:port…] to KafkaConfig::new",
            ));
        }
        if let Some(topic) = &self.leader_topic {
            check_kafka_name("leader topic", topic)?;
            if topic.len() > MAX_TOPIC_LEN {
                return Err(KafkaBackendError::config(format!(
                    "the leader topic is {} characters long: Kafka allows at most {MAX_TOPIC_LEN}",
                    topic.len()
                )));
            }
        }
        if let Some(id) = &self.group_id {
            check_kafka_name("consumer group id", id)?;
        }
        if self.heartbeat_timeout > MAX_TIMEOUT {
            return Err(KafkaBackendError::config(format!(
                "the heartbeat timeout is {:?}: at most {MAX_TIMEOUT:?} (its session timeout, three \
                 of them, is then Kafka's default group.max.session.timeout.ms)",
                self.heartbeat_timeout
            )));
        }
        for (what, d) in [
            ("poll duration", self.poll_duration),
            ("minimum poll interval", self.min_poll_interval),
            ("heartbeat timeout", self.heartbeat_timeout),
            ("close timeout", self.close_timeout),
        ] {
            if d < Duration::from_millis(1) {
                return Err(KafkaBackendError::config(format!(
                    "the {what} is {d:?}: it must be at least 1 ms"
                )));
            }
        }
        if self.min_poll_interval >= self.heartbeat_timeout {
            return Err(KafkaBackendError::config(format!(
                "the minimum poll interval ({:?}) must be shorter than the heartbeat timeout ({:?}), \
                 or no heartbeat could come back in time: lower the interval or raise the timeout",
                self.min_poll_interval, self.heartbeat_timeout
            )));
        }
        for (key, why) in FORBIDDEN {
            if self.properties.contains_key(*key) {
                return Err(KafkaBackendError::config(format!(
                    "the property {key} cannot be passed through: {why}"
                )));
            }
        }
        if let Some(value) = self.properties.get("heartbeat.interval.ms") {
            let limit = self.heartbeat_timeout.mul_f64(MAX_GROUP_HEARTBEAT_INTERVAL);
            match value.trim().parse::<u64>() {
                Ok(ms) if ms >= 1 && Duration::from_millis(ms) < limit => {}
                _ => {
                    return Err(KafkaBackendError::config(format!(
                        "heartbeat.interval.ms={value} does not fit: it must be a whole number of \
                         milliseconds, at least 1 and below 1.5 heartbeat timeouts ({} ms), or the \
                         group could expire a live leader's session before it is fenced; leave it \
                         unset for a fifth of the heartbeat timeout",
                        limit.as_millis()
                    )));
                }
            }
        }
        let managed = self.managed_properties("group");
        for (key, why) in MANAGED {
            if let Some(value) = self.properties.get(*key) {
                let ours = managed.get(*key).map(String::as_str);
                let same =
                    ours == Some(value.as_str()) || (key.contains("acks") && value.trim() == "-1");
                if *key == "group.id" || !same {
                    return Err(KafkaBackendError::config(format!(
                        "the property {key}={value} cannot be passed through: tenure-kafka sets it \
                         from {why}"
                    )));
                }
            }
        }
        // librdkafka checks names and values of every property here,
        // without connecting, so a typo fails at construction.
        for props in [
            self.consumer_properties("group"),
            self.producer_properties(),
        ] {
            self.client_config(&props)
                .create_native_config()
                .map_err(|e| {
                    KafkaBackendError::config(format!(
                        "librdkafka rejects the properties: {}",
                        self.scrub(&e.to_string())
                    ))
                })?;
        }
        Ok(())
    }

    fn managed_properties(&self, group: &str) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("bootstrap.servers".into(), self.brokers.clone());
        m.insert("group.id".into(), self.resolved_group_id(group));
        m.insert("enable.auto.commit".into(), "false".into());
        m.insert(
            "session.timeout.ms".into(),
            millis(self.session_timeout()).to_string(),
        );
        m.insert(
            "delivery.timeout.ms".into(),
            millis(self.heartbeat_timeout).to_string(),
        );
        m.insert("linger.ms".into(), "0".into());
        m.insert("enable.partition.eof".into(), "false".into());
        m.insert("group.protocol".into(), "classic".into());
        m.insert("allow.auto.create.topics".into(), "false".into());
        m.insert(
            "statistics.interval.ms".into(),
            (millis(self.heartbeat_timeout) / 10)
                .clamp(100, 60_000)
                .to_string(),
        );
        m.insert("acks".into(), "all".into());
        m.insert("request.required.acks".into(), "all".into());
        m
    }

    /// Every property of the group consumer for tenure group `group`:
    /// the passed-through ones, then the managed ones (group id, auto-commit
    /// off, `session.timeout.ms` = 3 × heartbeat timeout).
    pub fn consumer_properties(&self, group: &str) -> BTreeMap<String, String> {
        let mut props = self.base_properties();
        self.set_managed(
            &mut props,
            group,
            &[
                "group.id",
                "enable.auto.commit",
                "session.timeout.ms",
                "enable.partition.eof",
                "group.protocol",
                "allow.auto.create.topics",
                "statistics.interval.ms",
            ],
        );
        // The group coordinator learns of a rebalance (a member joined,
        // left or died) at the next group heartbeat: a fifth of the
        // heartbeat timeout keeps hand-overs quick, and far inside the
        // session timeout (the safety argument needs it below 1.8 ×
        // the heartbeat timeout; validation refuses 1.5 and more).
        props
            .entry("heartbeat.interval.ms".into())
            .or_insert_with(|| (millis(self.heartbeat_timeout) / 5).max(1).to_string());
        self.default_fetch_wait(&mut props);
        props
    }

    /// Every property of the heartbeat producer: the passed-through ones,
    /// then `delivery.timeout.ms` = heartbeat timeout and `linger.ms` = 0.
    pub fn producer_properties(&self) -> BTreeMap<String, String> {
        let mut props = self.base_properties();
        // The producer learns of the topic from metadata; with
        // auto-creation a heartbeat would create a deleted topic anew
        // (with offsets, hence tokens, from 0: librdkafka's producers
        // allow it by default).
        props.remove("request.required.acks");
        self.set_managed(
            &mut props,
            "group",
            &[
                "delivery.timeout.ms",
                "linger.ms",
                "allow.auto.create.topics",
                "acks",
            ],
        );
        // librdkafka requires message.timeout (= delivery.timeout) to be at
        // least linger.ms and, for the default, request.timeout.ms must
        // not exceed it.
        props
            .entry("request.timeout.ms".into())
            .or_insert_with(|| millis(self.heartbeat_timeout).min(30_000).to_string());
        props
    }

    /// Properties of a consumer that reads the leader topic without joining
    /// the group (every candidate's reader, and observers).
    pub fn reader_properties(&self) -> BTreeMap<String, String> {
        let mut props = self.base_properties();
        // librdkafka assigns partitions only to a consumer with a group id;
        // one that assigns and never subscribes never joins that group, and
        // never commits, so the broker does not even learn of it.
        props.insert("group.id".into(), "tenure-kafka-observer".into());
        props.insert("enable.auto.commit".into(), "false".into());
        props.insert("allow.auto.create.topics".into(), "false".into());
        props.insert("group.protocol".into(), "classic".into());
        // End-of-partition events tell when the reader is positioned.
        props.insert("enable.partition.eof".into(), "true".into());
        // Out of range (records removed under it, or the topic recreated
        // with fewer): start over from the first record there is, never
        // skip to the end past records it has not read. Offsets that then
        // go back are reported.
        props.insert("auto.offset.reset".into(), "earliest".into());
        self.default_fetch_wait(&mut props);
        props
    }

    /// Properties of the admin client that creates the topic.
    pub(crate) fn admin_properties(&self) -> BTreeMap<String, String> {
        self.base_properties()
    }

    /// Sets `keys` in `props` to the values tenure-kafka manages for
    /// tenure group `group`, over any passed through. (Every key named here
    /// is one `managed_properties` sets; the tests check each value.)
    fn set_managed(&self, props: &mut BTreeMap<String, String>, group: &str, keys: &[&str]) {
        let mut managed = self.managed_properties(group);
        for key in keys {
            if let Some(value) = managed.remove(*key) {
                props.insert((*key).into(), value);
            }
        }
    }

    /// `fetch.wait.max.ms`, unless passed through: the minimum poll
    /// interval, at most 500 ms. A fence should follow a stalled broker
    /// quickly; the default (500 ms) would add that much to every
    /// heartbeat's round trip on brokers that hold fetches open.
    fn default_fetch_wait(&self, props: &mut BTreeMap<String, String>) {
        props
            .entry("fetch.wait.max.ms".into())
            .or_insert_with(|| millis(self.min_poll_interval).min(500).to_string());
    }

    fn base_properties(&self) -> BTreeMap<String, String> {
        let mut props = self.properties.clone();
        props.insert("bootstrap.servers".into(), self.brokers.clone());
        props
    }

    /// `message` (librdkafka's, which may quote a property's value) with
    /// the value of every secret property masked.
    pub(crate) fn scrub(&self, message: &str) -> String {
        let mut out = message.to_owned();
        for (key, value) in &self.properties {
            if is_secret(key) && !value.is_empty() {
                out = out.replace(value.as_str(), "***");
            }
        }
        out
    }

    pub(crate) fn client_config(&self, props: &BTreeMap<String, String>) -> ClientConfig {
        let mut cc = ClientConfig::new();
        for (k, v) in props {
            cc.set(k, v);
        }
        cc
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Replaces every character outside Kafka's name set `[a-zA-Z0-9._-]` with
/// `_`, as goneli's `Sanitise` does.
pub fn sanitise(name: &str) -> String {
    name.chars()
        .map(|c| if is_kafka_char(c) { c } else { '_' })
        .collect()
}

fn is_kafka_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn check_kafka_name(what: &str, name: &str) -> Result<(), KafkaBackendError> {
    if name.is_empty() {
        return Err(KafkaBackendError::config(format!(
            "the {what} is empty: give a name of [a-zA-Z0-9._-], or leave it unset to derive it from the group"
        )));
    }
    if name == "." || name == ".." {
        return Err(KafkaBackendError::config(format!(
            "the {what} {name:?} is not allowed by Kafka: choose another name"
        )));
    }
    if let Some(bad) = name.chars().find(|c| !is_kafka_char(*c)) {
        return Err(KafkaBackendError::config(format!(
            "the {what} {name:?} contains {bad:?}: Kafka names may use only a-z, A-Z, 0-9, '.', '_' and '-' \
             (tenure_kafka::sanitise replaces the rest with '_')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goneli_defaults() {
        let c = KafkaConfig::default();
        assert_eq!(c.brokers, "localhost:9092");
        assert_eq!(c.min_poll_interval, Duration::from_millis(100));
        assert_eq!(c.poll_duration, Duration::from_millis(1));
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(5));
        assert_eq!(c.close_timeout, Duration::from_secs(10));
        assert_eq!(c.session_timeout(), Duration::from_secs(15));
        let consumer = c.consumer_properties("billing");
        assert_eq!(consumer["group.id"], "billing");
        assert_eq!(consumer["enable.auto.commit"], "false");
        assert_eq!(consumer["session.timeout.ms"], "15000");
        let producer = c.producer_properties();
        assert_eq!(producer["delivery.timeout.ms"], "5000");
        assert_eq!(producer["linger.ms"], "0");
        assert!(!producer.contains_key("group.id"));
        assert_eq!(c.resolved_topic("billing"), "billing.neli");
        c.validate().unwrap();
    }

    #[test]
    fn derived_names_are_sanitised_and_bounded() {
        let c = KafkaConfig::default();
        assert_eq!(c.resolved_group_id("billing/eu west"), "billing_eu_west");
        assert_eq!(c.resolved_topic("billing/eu west"), "billing_eu_west.neli");
        assert_eq!(c.resolved_group_id(".."), "_..");
        let long = "x".repeat(255);
        assert!(c.resolved_topic(&long).len() <= 249);
        let c = KafkaConfig {
            group_id: Some("g1".into()),
            leader_topic: Some("t1".into()),
            ..c
        };
        assert_eq!(c.resolved_group_id("whatever"), "g1");
        assert_eq!(c.resolved_topic("whatever"), "t1");
    }

    #[test]
    fn heartbeat_timeout_drives_session_and_delivery_timeouts() {
        let c = KafkaConfig {
            heartbeat_timeout: Duration::from_secs(2),
            ..KafkaConfig::default()
        };
        assert_eq!(c.consumer_properties("g")["session.timeout.ms"], "6000");
        assert_eq!(c.producer_properties()["delivery.timeout.ms"], "2000");
    }

    #[test]
    fn debug_hides_secrets() {
        let c = KafkaConfig::default()
            .property("sasl.password", "hunter2")
            .property("ssl.key.password", "hunter3")
            .property("sasl.oauthbearer.config", "clientSecret=hunter4")
            .property("sasl.oauthbearer.client.secret", "hunter5")
            .property("sasl.jaas.config", "password=hunter6")
            .property("client.id", "visible");
        let d = format!("{c:?}");
        assert!(!d.contains("hunter"), "{d}");
        assert!(d.contains("visible"), "{d}");
    }

    /// The properties of each of the three clients tenure-kafka makes:
    /// the group's consumer, the producer and the reader.
    fn every_client(c: &KafkaConfig) -> [(&'static str, BTreeMap<String, String>); 3] {
        [
            ("consumer", c.consumer_properties("g")),
            ("producer", c.producer_properties()),
            ("reader", c.reader_properties()),
        ]
    }

    #[test]
    fn other_properties_pass_through() {
        let c = KafkaConfig::default()
            .property("client.id", "billing-7")
            .property("max.poll.interval.ms", "60000");
        c.validate().unwrap();
        for (client, properties) in every_client(&c) {
            assert_eq!(properties["client.id"], "billing-7", "{client}");
        }
        assert_eq!(c.consumer_properties("g")["max.poll.interval.ms"], "60000");
    }

    #[test]
    fn rejects_bad_settings_naming_the_fix() {
        let err = |c: KafkaConfig| c.validate().unwrap_err().to_string();
        let changed = |change: fn(&mut KafkaConfig)| {
            let mut c = KafkaConfig::default();
            change(&mut c);
            c
        };
        let cases = [
            (KafkaConfig::new(" "), "no brokers"),
            (changed(|c| c.leader_topic = Some("a/b".into())), "'/'"),
            (changed(|c| c.leader_topic = Some(String::new())), "empty"),
            (
                changed(|c| c.leader_topic = Some("..".into())),
                "not allowed",
            ),
            (changed(|c| c.leader_topic = Some("t".repeat(250))), "249"),
            (changed(|c| c.group_id = Some("g h".into())), "' '"),
            (
                changed(|c| c.poll_duration = Duration::ZERO),
                "poll duration",
            ),
            (
                changed(|c| c.min_poll_interval = Duration::from_micros(10)),
                "minimum poll interval",
            ),
            (
                changed(|c| c.heartbeat_timeout = Duration::ZERO),
                "heartbeat timeout",
            ),
            (
                changed(|c| c.close_timeout = Duration::ZERO),
                "close timeout",
            ),
            (
                changed(|c| c.min_poll_interval = Duration::from_secs(6)),
                "shorter than the heartbeat timeout",
            ),
            (
                KafkaConfig::default().property("session.timeout.ms", "45000"),
                "heartbeat_timeout",
            ),
            (KafkaConfig::default().property("group.id", "x"), "group_id"),
            (
                KafkaConfig::default().property("enable.auto.commit", "true"),
                "never committed",
            ),
            (
                KafkaConfig::default().property("no.such.property", "1"),
                "librdkafka rejects",
            ),
        ];
        for (c, expected) in cases {
            let e = err(c);
            assert!(e.contains(expected), "{expected}: {e}");
        }
        // librdkafka quotes a bad value (here a password pasted into the
        // wrong property): a secret one is masked.
        let e = err(KafkaConfig::default()
            .property("ssl.key.password", "hunter2")
            .property("security.protocol", "hunter2"));
        assert!(
            e.contains("librdkafka rejects") && !e.contains("hunter2"),
            "{e}"
        );
        // The value tenure-kafka would set anyway is accepted.
        KafkaConfig::default()
            .property("session.timeout.ms", "15000")
            .property("linger.ms", "0")
            .validate()
            .unwrap();
    }

    /// Hole 3: configuration that breaks the margin is refused.
    #[test]
    fn settings_that_break_the_safety_margin_are_refused() {
        let err = |c: KafkaConfig| c.validate().unwrap_err().to_string();
        let e = err(KafkaConfig::default().property("group.instance.id", "host-a"));
        assert!(
            e.contains("static membership") && e.contains("remove group.instance.id"),
            "{e}"
        );
        // H = 5 s: 1.5 H = 7.5 s.
        for bad in ["7500", "9000", "0", "soon", "-1"] {
            let e = err(KafkaConfig::default().property("heartbeat.interval.ms", bad));
            assert!(
                e.contains("heartbeat.interval.ms") && e.contains("7500 ms"),
                "{bad}: {e}"
            );
        }
        KafkaConfig::default()
            .property("heartbeat.interval.ms", "7499")
            .validate()
            .unwrap();
        let e = err(KafkaConfig::default().property("group.protocol", "consumer"));
        assert!(e.contains("classic"), "{e}");
        let e = err(KafkaConfig::default().property("allow.auto.create.topics", "true"));
        assert!(e.contains("create_topic"), "{e}");
        for key in ["acks", "request.required.acks"] {
            let e = err(KafkaConfig::default().property(key, "1"));
            assert!(e.contains("acks=all"), "{e}");
            KafkaConfig::default()
                .property(key, "-1")
                .validate()
                .unwrap();
            KafkaConfig::default()
                .property(key, "all")
                .validate()
                .unwrap();
        }
        let e = err(KafkaConfig {
            heartbeat_timeout: Duration::from_secs(601),
            ..KafkaConfig::default()
        });
        assert!(e.contains("at most"), "{e}");
        KafkaConfig::default()
            .property("group.protocol", "classic")
            .validate()
            .unwrap();
    }

    #[test]
    fn clients_run_the_classic_protocol_and_never_create_the_topic() {
        let c = KafkaConfig::default().property("request.required.acks", "-1");
        for (client, properties) in every_client(&c) {
            assert_eq!(properties["allow.auto.create.topics"], "false", "{client}");
        }
        let consumer = c.consumer_properties("g");
        assert_eq!(consumer["group.protocol"], "classic");
        assert_eq!(consumer["heartbeat.interval.ms"], "1000");
        let producer = c.producer_properties();
        assert_eq!(producer["acks"], "all");
        assert!(!producer.contains_key("request.required.acks"));
        let reader = c.reader_properties();
        assert_eq!(reader["enable.partition.eof"], "true");
        assert_eq!(reader["auto.offset.reset"], "earliest");
        c.validate().unwrap();
    }
}
