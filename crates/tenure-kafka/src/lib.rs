//! Kafka backend for tenure (NELI leader induction).
#![deny(missing_docs)]
