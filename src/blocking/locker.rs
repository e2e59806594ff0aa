//! `blocking::Locker` (`Locker<Blocking>`). It opens its connections in
//! `Front::open` (`front.rs`); the constructors themselves are written
//! once in `src/handle/connect.rs`.

use crate::front::Blocking;

/// A lease client for std threads: `Locker<Blocking>` (see
/// [`Locker`](crate::Locker) for what every locker and its examples do).
/// Each call runs on the caller's thread and returns its result; dropping
/// a held lease releases it at once.
pub type Locker = crate::Locker<Blocking>;
