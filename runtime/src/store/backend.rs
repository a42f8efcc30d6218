//! The trait every store implements ([`Store`]), and how durable a write must be
//! ([`Durability`]).

use super::error::StoreError;
use super::node_rows::{NodeWrite, StoredNode};

/// How durable a write must be when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A request waits for it: it must survive a power loss (fsync before returning).
    Commit,
    /// Written behind (heartbeat-derived): it must survive a crash of the process; a power
    /// loss may take the last batches, which the next heartbeats rewrite anyway.
    Behind,
}

/// The controller's durable state. Implementations are used from one thread at a time (the
/// writer thread, or start-up before it exists).
pub trait Store: Send + 'static {
    /// Every stored node, ordered by node id.
    fn load_nodes(&mut self) -> Result<Vec<StoredNode>, StoreError>;
    /// Applies every write in one transaction: all of them reach the store, or none.
    fn write(&mut self, batch: &[NodeWrite], durability: Durability) -> Result<(), StoreError>;
    /// Whether the store answers (a trivial query).
    fn check(&mut self) -> Result<(), StoreError>;
    /// The applied schema version, for logs and tests.
    fn schema_version(&mut self) -> Result<u32, StoreError>;
}
