//! `blocking::Locker` (`Locker<Blocking>`) and how it opens its
//! connections: the pooled sync connections, over which it sends the
//! connect-time checks (`src/driver/connect.rs`). The constructors
//! themselves are written once in `src/handle/connect.rs`.

use super::connection::Commands;
use crate::config::Config;
use crate::driver::connect::{Ask, Checks};
use crate::driver::target::Target;
use crate::error::Error;
use crate::front::Blocking;

/// The locker's and its leases' shared state, over the pooled connections.
pub(crate) type Shared = crate::driver::state::Shared<Commands>;

/// A lease client for std threads: `Locker<Blocking>` (see
/// [`Locker`](crate::Locker) for what every locker and its examples do).
/// Each call runs on the caller's thread and returns its result; dropping
/// a held lease releases it at once.
pub type Locker = crate::Locker<Blocking>;

/// Opens a blocking locker's connections to `target` and runs the
/// connect-time checks (`Front::open`).
pub(super) fn open(target: Target, config: Config) -> Result<Locker, Error> {
    let (source, notifications) = target.sources(&config, Some(0))?;
    let cluster = source.is_cluster();
    let timeout = config.command_timeout;
    let shared = Shared::new(Commands::new(source, timeout), notifications, config);
    let mut checks = Checks::new(cluster, &shared.state.config);
    while let Some(ask) = checks.next() {
        let reply = match ask {
            Ask::One(cmd) => shared.commands.query_fresh(&cmd),
            Ask::EveryPrimary(cmd) => shared.commands.every_primary(&cmd),
        };
        if checks.handle(reply)? {
            shared.connected();
        }
    }
    Ok(Locker::from_shared(shared))
}
