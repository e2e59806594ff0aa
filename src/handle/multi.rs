//! Multi-key leases (docs/PROTOCOL.md): N keys held at once, all or
//! nothing, each with a fence of its own. A multi-key lease is a
//! `Lease<F, kind::Multi>`, so renew, release, drop and `keep_alive` are
//! the lease's own operations; only the acquire and the fence accessors
//! are here.

use std::time::Duration;

use super::kind;
use super::lease::Lease;
use super::locker::Locker;
use crate::clock::now;
use crate::config::AcquireOptions;
use crate::core::multi::KeySet;
use crate::core::names::KeyId;
use crate::core::outcome::Fence;
use crate::driver::ops::Acquire;
use crate::error::Error;
use crate::front::{Call, Front};

impl<F: Front> Locker<F> {
    /// Acquires every key of `keys` at once, waiting up to the config's
    /// `wait`: one script takes all of them or none, so the lease never
    /// holds part of the keys, and waiting holds nothing (two callers
    /// taking `{a, b}` and `{b, a}` never deadlock). Each key gets its own
    /// fence from its own counter, the one single-key leases of that key
    /// use: a store checks a write to resource `k` with
    /// [`fence_of(k)`](Lease::fence_of).
    ///
    /// A single-key lease of any of the keys excludes the multi-key lease
    /// and the other way round. While it waits, the lease reserves the
    /// keys it finds free (others see them as held), and the oldest waiting
    /// multi-key lease takes a younger one's reservations over; with the
    /// hand-over it also queues behind the single-key waiters of each key
    /// held, so neither kind starves the other (docs/PROTOCOL.md §6).
    ///
    /// # Errors
    ///
    /// `InvalidKey` before anything is sent: no key or more than 64, a bad
    /// key, two equal keys, or on Redis Cluster keys stored in different
    /// hash slots (the reason names positions, never a key). Otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.acquire_all(&["account:7", "account:9"])?; // aio: .await?
    /// let (from, to) = (lease.fences()[0], lease.fences()[1]);
    /// assert_eq!(lease.fence_of("account:9"), Some(to));
    /// println!("moving money with fences {from} and {to}");
    /// lease.release()?;                                         // all keys at once
    /// # Ok(()) }
    /// ```
    pub fn acquire_all<'a, K: AsRef<str> + Sync>(
        &'a self,
        keys: &'a [K],
    ) -> Call<'a, F, Result<Lease<F, kind::Multi>, Error>> {
        self.acquire_all_with(keys, AcquireOptions::new())
    }

    /// Tries once for every key of `keys`: `Busy` when any is held (and
    /// at once, without asking Redis, when one of this locker's waiters
    /// waits for one of them).
    ///
    /// # Errors
    ///
    /// As [`acquire_all`](Self::acquire_all).
    pub fn try_acquire_all<'a, K: AsRef<str> + Sync>(
        &'a self,
        keys: &'a [K],
    ) -> Call<'a, F, Result<Lease<F, kind::Multi>, Error>> {
        self.acquire_all_with(keys, AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires every key of `keys` with per-call options (wait, lease,
    /// cancel handle).
    ///
    /// # Errors
    ///
    /// As [`acquire_all`](Self::acquire_all), plus `Cancelled` and
    /// `InvalidConfig` for a lease out of bounds.
    pub fn acquire_all_with<'a, K: AsRef<str> + Sync>(
        &'a self,
        keys: &'a [K],
        options: AcquireOptions,
    ) -> Call<'a, F, Result<Lease<F, kind::Multi>, Error>> {
        let shared = self.shared();
        let start = move || {
            let config = &shared.state.config;
            KeySet::of(keys, config.max_key_bytes, config.key_hash_tags)
                .and_then(|set| Acquire::start_multi(&shared.state, set, options, now()))
                .map_err(Err)
        };
        F::run(shared, None, start, move |granted| {
            granted.map(|granted| Lease::new(shared.clone(), granted))
        })
    }
}

impl<F: Front> Lease<F, kind::Multi> {
    /// The fence of each key, in the order the keys were given: each is
    /// strictly increasing per key, across single- and multi-key leases.
    pub fn fences(&self) -> &[Fence] {
        self.held().fences()
    }

    /// The fence of `key`, if it is one of this lease's keys.
    pub fn fence_of(&self, key: &str) -> Option<Fence> {
        self.held().fence_of(KeyId::of(key))
    }

    /// How many keys this lease holds.
    pub fn len(&self) -> usize {
        self.fences().len()
    }

    /// Always false: a multi-key lease holds at least one key.
    pub fn is_empty(&self) -> bool {
        self.fences().is_empty()
    }
}
