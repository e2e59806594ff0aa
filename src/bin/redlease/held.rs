//! What `run` holds while the command runs: the key's lock (the default),
//! a read (`--shared`) or write (`--exclusive`) lease of its read-write
//! lease, a permit of its semaphore (`--permits N`), several keys' locks
//! as one multi-key lease (`--also`), or (`elect`) the
//! leadership of an election, behind one small interface, so the acquire,
//! supervision and release are written once.

use std::time::Duration;

use redlease::blocking::{Leadership, Lease, MultiLease, Permit, ReadLease, WriteLease};
use redlease::front::Blocking;
use redlease::kind::Kind;
use redlease::{Error, Fence, Lost, ReleaseOutcome};

use crate::Target;

/// A lease's life, the same for every kind but the leadership.
pub(crate) trait Lasting: Sync {
    fn is_valid(&self) -> bool;
    fn remaining(&self) -> Duration;
    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T;
    fn release(self) -> Result<ReleaseOutcome, Error>;
}

impl<K: Kind> Lasting for redlease::Lease<Blocking, K> {
    fn is_valid(&self) -> bool {
        Self::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        Self::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        Self::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        Self::release(self)
    }
}

/// `elect`'s leadership: its keeper renews it, so keeping it alive is
/// only watching its loss signal.
impl Lasting for Leadership {
    fn is_valid(&self) -> bool {
        Self::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        Self::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        f(self.lost())
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        self.resign()
    }
}

/// A lease of any kind, as `run` uses it.
pub(crate) trait Held: Lasting {
    /// The variable that hands [`number`](Self::number) to the command.
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    /// What it is called in messages.
    const NAME: &'static str;
    /// The lease's fence, or a read lease's epoch.
    fn number(&self) -> Fence;
    /// A permit's slot (for REDLEASE_SLOT); `None` for the other kinds.
    fn slot(&self) -> Option<u32> {
        None
    }
    /// Variables of the kind beyond [`VARIABLE`](Self::VARIABLE), for the
    /// command run under it on `key`.
    fn more_variables(&self, _key: &str) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Where `run` records who holds it, for `status` (see `holder.rs`),
    /// each with the fence the record names: beside the lock (each key's,
    /// `keys` being KEY and the `--also` keys) or the permit's slot; none
    /// when `status` cannot show it (read-write leases: readers share).
    fn records(&self, _target: &Target, _keys: &[&str]) -> Vec<(String, Fence)> {
        Vec::new()
    }
}

impl Held for Lease {
    const NAME: &'static str = "lease";

    fn number(&self) -> Fence {
        self.fence()
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        vec![(target.name("lock-holder", keys[0]), self.fence())]
    }
}

impl Held for ReadLease {
    const VARIABLE: &'static str = "REDLEASE_EPOCH";
    const NAME: &'static str = "shared lease";

    fn number(&self) -> Fence {
        self.epoch()
    }
}

impl Held for WriteLease {
    const NAME: &'static str = "exclusive lease";

    fn number(&self) -> Fence {
        self.fence()
    }
}

impl Held for Permit {
    const NAME: &'static str = "permit";

    /// The slot's fence (fences count per slot).
    fn number(&self) -> Fence {
        self.fence()
    }

    fn slot(&self) -> Option<u32> {
        Some(Permit::slot(self))
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        let name = target.slot_name("sem-holder", keys[0], Permit::slot(self));
        vec![(name, self.fence())]
    }
}

/// `elect`'s leadership: its term is its fence.
impl Held for Leadership {
    const NAME: &'static str = "leadership";

    fn number(&self) -> Fence {
        self.term()
    }

    fn more_variables(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![
            ("REDLEASE_TERM", self.term().to_string()),
            ("REDLEASE_ELECTION", key.to_owned()),
        ]
    }
}

/// `--also`: KEY's lock and every `--also` key's, as one multi-key lease.
/// Its number is KEY's fence; every key's comes as REDLEASE_FENCES.
impl Held for MultiLease {
    const NAME: &'static str = "multi-key lease";

    /// KEY's fence: the first key's (a multi-key lease has at least one).
    fn number(&self) -> Fence {
        self.fences().first().copied().unwrap_or(Fence::new(0))
    }

    fn more_variables(&self, _key: &str) -> Vec<(&'static str, String)> {
        let fences: Vec<String> = self.fences().iter().map(Fence::to_string).collect();
        vec![("REDLEASE_FENCES", fences.join(" "))]
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        keys.iter()
            .zip(self.fences())
            .map(|(key, fence)| (target.name("lock-holder", key), *fence))
            .collect()
    }
}
