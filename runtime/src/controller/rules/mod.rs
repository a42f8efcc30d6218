//! The fleet's rules as pure functions of a node's state and the clock: the node lifecycle
//! (`nodes`), reading a heartbeat's entries so one bad VM never discards the node
//! (`heartbeat_entries`), and the disk-overcommit ledger (`ledger`). Callers hold the node's
//! lock and do the I/O afterwards.

pub mod heartbeat_entries;
pub mod ledger;
pub mod nodes;
