//! The Events waiting to be written: one bounded queue per type, repeats folded in.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use jiff::Timestamp;

use super::notice::{Notice, Regarding, Severity};

/// One Event's identity: the object and the notice.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub regarding: Regarding,
    pub notice: Notice,
}

/// How often, and when first and last, an Event was asked for since it was queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Occurrences {
    pub count: u32,
    pub first: Timestamp,
    pub last: Timestamp,
}

/// What [`Pending::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queued {
    /// A new Event in the queue.
    Added,
    /// The same Event was already queued: counted in it.
    Folded,
    /// The queue of its type was full: dropped.
    Dropped,
}

#[derive(Debug)]
struct Lane {
    order: VecDeque<Arc<Key>>,
    entries: HashMap<Arc<Key>, Occurrences>,
    capacity: usize,
}

impl Lane {
    fn new(capacity: usize) -> Self {
        Lane {
            order: VecDeque::new(),
            entries: HashMap::new(),
            capacity,
        }
    }

    fn push(&mut self, key: Key, now: Timestamp) -> Queued {
        if let Some(o) = self.entries.get_mut(&key) {
            o.count = o.count.saturating_add(1);
            o.last = now;
            return Queued::Folded;
        }
        if self.order.len() >= self.capacity {
            return Queued::Dropped;
        }
        let key = Arc::new(key);
        self.order.push_back(key.clone());
        self.entries.insert(
            key,
            Occurrences {
                count: 1,
                first: now,
                last: now,
            },
        );
        Queued::Added
    }

    fn pop(&mut self) -> Option<(Arc<Key>, Occurrences)> {
        let key = self.order.pop_front()?;
        let o = self.entries.remove(&key)?;
        Some((key, o))
    }
}

/// The queues: Warnings and Normals apart, each holding at most `capacity` distinct Events.
#[derive(Debug)]
pub(crate) struct Pending {
    warnings: Lane,
    normals: Lane,
    /// Dropped since the worker last said so in the log.
    pub dropped_unlogged: u64,
}

impl Pending {
    pub fn new(capacity: usize) -> Self {
        Pending {
            warnings: Lane::new(capacity),
            normals: Lane::new(capacity),
            dropped_unlogged: 0,
        }
    }

    pub fn push(&mut self, key: Key, now: Timestamp) -> Queued {
        let queued = match key.notice.severity {
            Severity::Warning => self.warnings.push(key, now),
            Severity::Normal => self.normals.push(key, now),
        };
        if queued == Queued::Dropped {
            self.dropped_unlogged += 1;
        }
        queued
    }

    /// The next Event to write: the oldest Warning, else the oldest Normal.
    pub fn pop(&mut self) -> Option<(Arc<Key>, Occurrences)> {
        self.warnings.pop().or_else(|| self.normals.pop())
    }

    pub fn len(&self) -> usize {
        self.warnings.order.len() + self.normals.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(severity: Severity, name: &str, note: &str) -> Key {
        Key {
            regarding: Regarding {
                api_version: "v1".into(),
                kind: "TrainJob".into(),
                namespace: "ns".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            notice: Notice {
                severity,
                reason: "R",
                action: "A",
                note: note.into(),
            },
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("timestamp")
    }

    #[test]
    fn repeats_fold_into_the_queued_event_with_count_and_times() {
        let mut p = Pending::new(4);
        assert_eq!(p.push(key(Severity::Normal, "a", "n"), t(1)), Queued::Added);
        assert_eq!(
            p.push(key(Severity::Normal, "a", "n"), t(2)),
            Queued::Folded
        );
        assert_eq!(
            p.push(key(Severity::Normal, "a", "n"), t(3)),
            Queued::Folded
        );
        assert_eq!(
            p.push(key(Severity::Normal, "a", "other note"), t(3)),
            Queued::Added,
            "another note is another Event"
        );
        assert_eq!(p.len(), 2);
        let (k, o) = p.pop().expect("one");
        assert_eq!(k.notice.note, "n");
        assert_eq!((o.count, o.first, o.last), (3, t(1), t(3)));
    }

    #[test]
    fn a_full_queue_drops_new_events_of_its_type_only() {
        let mut p = Pending::new(2);
        for name in ["a", "b"] {
            assert_eq!(
                p.push(key(Severity::Normal, name, "n"), t(1)),
                Queued::Added
            );
        }
        assert_eq!(
            p.push(key(Severity::Normal, "c", "n"), t(1)),
            Queued::Dropped
        );
        assert_eq!(
            p.push(key(Severity::Normal, "a", "n"), t(2)),
            Queued::Folded,
            "a repeat of a queued Event still counts"
        );
        assert_eq!(
            p.push(key(Severity::Warning, "c", "w"), t(1)),
            Queued::Added,
            "Warnings have a queue of their own"
        );
        assert_eq!(p.dropped_unlogged, 1);
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn warnings_are_written_first_then_normals_in_order() {
        let mut p = Pending::new(8);
        p.push(key(Severity::Normal, "n1", "n"), t(1));
        p.push(key(Severity::Warning, "w1", "w"), t(2));
        p.push(key(Severity::Normal, "n2", "n"), t(3));
        p.push(key(Severity::Warning, "w2", "w"), t(4));
        let order: Vec<String> = std::iter::from_fn(|| p.pop())
            .map(|(k, _)| k.regarding.name.clone())
            .collect();
        assert_eq!(order, ["w1", "w2", "n1", "n2"]);
        assert_eq!(p.len(), 0);
    }
}
