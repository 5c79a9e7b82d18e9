//! A simulated apiserver for the state machine's tests: two objects, one resourceVersion
//! counter, updates preconditioned on resourceVersion, and an executor loop written the way
//! the controller's is (read → decide → apply → put, 409 → record and read again).

use serde_json::{Value, json};

use super::{Attempts, Call, Decision, HeldObject, HeldView, HoldError, Outcome, apply, object};
use crate::mode::Mode;

#[derive(Clone, Debug)]
pub(crate) struct Sim {
    pub mode: Mode,
    pub trainjob: Value,
    pub workload: Option<Value>,
    pub pods_remain: bool,
    rv: u64,
}

/// The update's precondition did not match: a 409.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Conflict;

impl Sim {
    /// A managed TrainJob as the webhook leaves it on create: suspended at its start gate.
    /// In Kueue mode it also has its Workload.
    pub fn new(mode: Mode) -> Sim {
        let mut sim = Sim {
            mode,
            trainjob: json!({"metadata": {"name": "mnist", "annotations": {}}, "spec": {"suspend": true}}),
            workload: (mode == Mode::Kueue)
                .then(|| json!({"metadata": {"name": "trainjob-mnist"}, "spec": {"active": true}})),
            pods_remain: false,
            rv: 0,
        };
        sim.bump(HeldObject::TrainJob);
        if mode == Mode::Kueue {
            sim.bump(HeldObject::Workload);
        }
        sim
    }

    fn slot(&mut self, target: HeldObject) -> Option<&mut Value> {
        match target {
            HeldObject::TrainJob => Some(&mut self.trainjob),
            HeldObject::Workload => self.workload.as_mut(),
        }
    }

    pub fn get(&self, target: HeldObject) -> Option<Value> {
        match target {
            HeldObject::TrainJob => Some(self.trainjob.clone()),
            HeldObject::Workload => self.workload.clone(),
        }
    }

    /// Gives `target` a new resourceVersion, as any write does.
    fn bump(&mut self, target: HeldObject) {
        self.rv += 1;
        let rv = self.rv.to_string();
        if let Some(obj) = self.slot(target) {
            obj["metadata"]["resourceVersion"] = Value::String(rv);
        }
    }

    /// Another writer's update (a controller's status update, say): only the version moves.
    pub fn touch(&mut self, target: HeldObject) {
        self.bump(target);
    }

    /// An update preconditioned on `obj`'s resourceVersion.
    pub fn put(&mut self, target: HeldObject, obj: Value) -> Result<(), Conflict> {
        let current = self
            .get(target)
            .and_then(|c| object::resource_version(&c).map(str::to_owned));
        if current.is_none() || current.as_deref() != object::resource_version(&obj) {
            return Err(Conflict);
        }
        if let Some(slot) = self.slot(target) {
            *slot = obj;
        }
        self.bump(target);
        Ok(())
    }

    /// Marks the TrainJob finished.
    pub fn end(&mut self, succeeded: bool) {
        let kind = if succeeded { "Complete" } else { "Failed" };
        self.trainjob["status"] = json!({"conditions": [{"type": kind, "status": "True"}]});
        self.bump(HeldObject::TrainJob);
    }

    /// A read of what `call` decides on.
    pub fn view(&self, call: &Call) -> Result<HeldView, HoldError> {
        HeldView::read(
            call,
            self.mode,
            &self.trainjob,
            self.workload.as_ref(),
            self.pods_remain,
        )
    }

    /// Runs `call` to its end like the executor; `between` runs between each read and its
    /// write (other writers acting), given the try number from 0.
    pub fn run_with(
        &mut self,
        call: &Call,
        mut between: impl FnMut(&mut Sim, u32),
    ) -> Result<Outcome, HoldError> {
        let mut attempts = Attempts::new();
        loop {
            let view = self.view(call)?;
            match attempts.decide(call, &view) {
                Decision::Done(outcome) => return Ok(outcome),
                Decision::Fail(err) => return Err(err),
                Decision::Write(write) => {
                    let mut obj = self
                        .get(write.target)
                        .ok_or_else(|| HoldError::no_workload("gone"))?;
                    apply(&write, &mut obj, self.mode)?;
                    between(self, attempts.conflicts());
                    match self.put(write.target, obj) {
                        Ok(()) => return Ok(write.outcome),
                        Err(Conflict) => attempts.conflicted()?,
                    }
                }
            }
        }
    }

    pub fn run(&mut self, call: &Call) -> Result<Outcome, HoldError> {
        self.run_with(call, |_, _| {})
    }

    pub fn held(&self) -> Option<&Value> {
        match self.mode {
            Mode::Plain => Some(&self.trainjob),
            Mode::Kueue => self.workload.as_ref(),
        }
    }

    /// The hold instance in force, if readable.
    pub fn instance(&self) -> Option<u64> {
        self.held().and_then(|h| object::hold_state(h).instance())
    }

    /// Who placed the hold in force, if recorded.
    pub fn holder(&self) -> Option<String> {
        self.held()
            .and_then(|h| object::hold_state(h).holder().map(str::to_owned))
    }

    /// Whether the held object is stopped.
    pub fn stopped(&self) -> bool {
        match self.mode {
            Mode::Plain => object::stopped(&self.trainjob, HeldObject::TrainJob),
            Mode::Kueue => self
                .workload
                .as_ref()
                .is_some_and(|w| object::stopped(w, HeldObject::Workload)),
        }
    }

    pub fn attempt(&self) -> u64 {
        object::attempt(&self.trainjob).unwrap_or(u64::MAX)
    }
}
