//! The controller (`fleetwire controller`) over its API: every operation against the document,
//! enrollment, placement, trust, the stores (SQLite, PostgreSQL), failover, and the faults it
//! survives.

mod api;
mod backup_restore;
mod connection_flood;
mod disk_full;
mod durability;
mod enrollment;
mod failover;
mod failover_mtls;
mod fleet_ca;
mod kill_under_load;
mod node_identity;
mod placement;
mod plain_mode_access;
mod postgres;
mod ppn_ids;
mod store_refusal;
mod tls_records;
mod trust;
mod unknown_fields;
mod unread_handshakes;
mod worker_threads;
