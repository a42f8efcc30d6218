//! The node agent (`fleetwire agent`) as a host runs it: its environment contract, desired and
//! reported state, supervision, enrollment and trust, and the crashes and outages it survives.

mod config;
mod controller_outage;
mod crash;
mod desired;
mod enroll;
mod kill_reconcile;
mod ppn;
mod qemu_bridge;
mod qemu_guest;
mod reported;
mod restarts;
mod smolvm;
mod trust;
mod wide_ids;
