//! The commands, one module each: what `tenure COMMAND` does, and what only
//! that command uses. What several commands share stays at the top of the
//! crate (the store URL, connecting, output, exit codes, how a leader is
//! shown), and the supervision of CMD is in [`crate::process`].

pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod release;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod watch;
