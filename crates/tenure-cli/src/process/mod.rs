//! The supervision of CMD, the child of `tenure run`: its process group
//! ([`child`]), the exec gate that holds it until its watchdog is armed
//! ([`gate`]), the watchdog process that enforces the term's deadline
//! ([`watchdog`]), and one term's run of CMD from start to stop
//! ([`supervise`]). The hidden `tenure exec-gate` and `tenure watchdog`
//! processes are the other sides of [`gate`] and [`watchdog`].

pub(crate) mod child;
pub(crate) mod gate;
pub(crate) mod supervise;
pub(crate) mod watchdog;
