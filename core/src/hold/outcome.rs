//! What a successful call did.

use serde::{Deserialize, Serialize};

/// What a successful call did, as reported in `{"result":"Ok","outcome":...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "outcome")]
pub enum Outcome {
    /// Hold: the hold was written (with the stop, in one update).
    Held,
    /// Hold: this instance was already in force (an earlier try landed); nothing written.
    AlreadyInForce,
    /// Release: the hold was lifted. `resumed`: plain mode, the TrainJob was unsuspended and
    /// A raised; Kueue mode, the Workload was re-activated (its next execution still waits
    /// for Kueue admission and the readmission gate). `false`: only the annotations were
    /// removed (never opened, ended, or stopped by someone else — or by Kueue for its own
    /// reason — before the hold was placed: that stop is left in place).
    Released { resumed: bool },
    /// Open: the opened mark was written. `started`: plain mode, the TrainJob was also
    /// unsuspended and A raised in the same update. `false`: a hold is in force, the job
    /// has ended, or Kueue mode (Kueue admission and the readmission gate start it).
    Opened { started: bool },
    /// Open: the gate was already open; nothing written.
    AlreadyOpen,
}
