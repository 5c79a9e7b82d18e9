//! The hold state machine: Hold, Release and Open as pure decisions.
//!
//! The I/O layer (the controller's executor) reads the object a call acts on, reduces the
//! read to a [`HeldView`], and asks [`decide`] (through [`Attempts`]) what to do: make one
//! [`Write`], preconditioned on the read's resourceVersion; or stop, with an [`Outcome`] or
//! a [`HoldError`]. Nothing here performs I/O or reads a clock: `now` is always passed in.
//!
//! The held object is the TrainJob in plain mode (the hold is `spec.suspend: true`) and the
//! TrainJob's Kueue Workload in Kueue mode (the hold is `spec.active: false`). The opened
//! mark and A always live on the TrainJob, so in Kueue mode Hold and Release write the
//! Workload and Open writes the TrainJob ([`Call::target`]).

mod after_write;
mod answer;
mod call;
pub mod classify;
mod decide;
mod error;
pub mod mark;
pub mod object;
mod outcome;
mod state;
mod status;
pub mod switch;
mod view;
mod write;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use after_write::{AfterWrite, WriteAnswer, after_write, marks_first};
pub use answer::{CallAnswer, StatusAnswer, Success};
pub use call::{
    CALL_BOUND_MIN_MARGIN, Call, CallKind, CallMeta, CallRequest, CallerId, HeldObject,
    MAX_REASON_BYTES, call_bound, first_unprintable, parse_call, printable, unprintable,
};
pub use decide::{Attempts, Decision, MAX_TRIES, decide, looks_for_pods};
pub use error::{ErrorBody, ErrorKind, HoldError, RejectCause};
pub use outcome::Outcome;
pub(crate) use state::parse_decimal;
pub use state::{HoldRecord, HoldState, Seen};
pub use status::{HoldStatus, Status};
pub use view::{AfterRead, FOUND_INACTIVE, FOUND_SUSPENDED, HeldView, after_read};
pub use write::{ApplyError, Write, apply};
