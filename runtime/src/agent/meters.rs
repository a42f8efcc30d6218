//! Usage meters that only ever grow, for the whole life of the host: accrued from each pass's
//! observation and saved to meters.json before every reported.json, so an agent restart (or
//! crash) continues from the saved values instead of zero.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use fleetwire_types::{
    AppId, AppMeters, HostId, HostMeterLedger, HostReportedState, InstanceState, Timestamp,
    UsageMeters,
};

use crate::document_file::{write_document, WriteError};
use crate::drivers::observation::InstanceStatus;

const MIB: u128 = 1024 * 1024;

fn zero() -> UsageMeters {
    UsageMeters {
        running_ms: 0,
        idle_ms: 0,
        cpu_ms: 0,
        rx_bytes: 0,
        tx_bytes: 0,
        disk_provisioned_mib_seconds: 0,
        disk_used_mib_seconds: 0,
    }
}

/// What the last pass saw of an app, to turn the next observation into increments.
struct Seen {
    at: Instant,
    driver_cpu_ms: u64,
    /// The driver's byte counts (delivered to the guest, sent by it) at the last pass.
    driver_bytes: (u64, u64),
    /// Fractions of a MiB-second not yet added, in MiB-ms and byte-ms.
    provisioned_mib_ms: u128,
    used_byte_ms: u128,
}

pub struct MeterBook {
    path: PathBuf,
    host_id: HostId,
    apps: BTreeMap<AppId, UsageMeters>,
    seen: HashMap<AppId, Seen>,
}

fn raise(into: &mut UsageMeters, from: &UsageMeters) {
    into.running_ms = into.running_ms.max(from.running_ms);
    into.idle_ms = into.idle_ms.max(from.idle_ms);
    into.cpu_ms = into.cpu_ms.max(from.cpu_ms);
    into.rx_bytes = into.rx_bytes.max(from.rx_bytes);
    into.tx_bytes = into.tx_bytes.max(from.tx_bytes);
    into.disk_provisioned_mib_seconds = into
        .disk_provisioned_mib_seconds
        .max(from.disk_provisioned_mib_seconds);
    into.disk_used_mib_seconds = into.disk_used_mib_seconds.max(from.disk_used_mib_seconds);
}

impl MeterBook {
    /// Starts from meters.json and the last reported.json, taking the larger of each meter, so
    /// a missing or damaged meters.json never makes a meter go down.
    pub fn load(path: PathBuf, host_id: HostId, reported: &Path) -> MeterBook {
        let mut apps: BTreeMap<AppId, UsageMeters> = BTreeMap::new();
        match std::fs::read(&path) {
            Ok(bytes) => match fleetwire_types::read::<HostMeterLedger>(&bytes) {
                Ok(ledger) => {
                    crate::unknown_fields::note(&ledger, &path.display().to_string());
                    for a in ledger.value.apps {
                        raise(apps.entry(a.app_id).or_insert_with(zero), &a.meters);
                    }
                }
                Err(r) => tracing::warn!(
                    "{}: ignored, not a valid HostMeterLedger: {r}",
                    path.display()
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("{}: cannot read: {e}", path.display()),
        }
        if let Ok(bytes) = std::fs::read(reported) {
            if let Ok(report) = fleetwire_types::read::<HostReportedState>(&bytes) {
                crate::unknown_fields::note(&report, &reported.display().to_string());
                for i in report.value.instances {
                    if let Some(m) = i.meters {
                        raise(apps.entry(i.app_id).or_insert_with(zero), &m);
                    }
                }
            }
        }
        MeterBook {
            path,
            host_id,
            apps,
            seen: HashMap::new(),
        }
    }

    pub fn all(&self) -> &BTreeMap<AppId, UsageMeters> {
        &self.apps
    }

    /// Accrues what happened since the last observation.
    pub fn observe(&mut self, instances: &[InstanceStatus], now: Instant) {
        for i in instances {
            let meters = self.apps.entry(i.app_id.clone()).or_insert_with(zero);
            let seen = self.seen.entry(i.app_id.clone()).or_insert(Seen {
                at: now,
                // The driver's count starts with this agent process: all of it is new.
                driver_cpu_ms: 0,
                driver_bytes: (0, 0),
                provisioned_mib_ms: 0,
                used_byte_ms: 0,
            });
            let dt_ms = now.duration_since(seen.at).as_millis();
            seen.at = now;
            match i.state {
                InstanceState::Running | InstanceState::Unhealthy => {
                    meters.running_ms = meters.running_ms.saturating_add(dt_ms as u64)
                }
                InstanceState::Idle | InstanceState::Stopped => {
                    meters.idle_ms = meters.idle_ms.saturating_add(dt_ms as u64)
                }
                _ => {}
            }
            // A driver count below the last one means the driver started counting again.
            let cpu_delta = i.cpu_ms.checked_sub(seen.driver_cpu_ms).unwrap_or(i.cpu_ms);
            seen.driver_cpu_ms = i.cpu_ms;
            meters.cpu_ms = meters.cpu_ms.saturating_add(cpu_delta);
            // The same for the byte counts (a tap device made again counts from 0).
            let rx_delta = i
                .rx_bytes
                .checked_sub(seen.driver_bytes.0)
                .unwrap_or(i.rx_bytes);
            let tx_delta = i
                .tx_bytes
                .checked_sub(seen.driver_bytes.1)
                .unwrap_or(i.tx_bytes);
            seen.driver_bytes = (i.rx_bytes, i.tx_bytes);
            meters.rx_bytes = meters.rx_bytes.saturating_add(rx_delta);
            meters.tx_bytes = meters.tx_bytes.saturating_add(tx_delta);

            seen.provisioned_mib_ms += i.resources.disk_mib as u128 * dt_ms;
            let whole = seen.provisioned_mib_ms / 1000;
            seen.provisioned_mib_ms %= 1000;
            meters.disk_provisioned_mib_seconds = meters
                .disk_provisioned_mib_seconds
                .saturating_add(whole.min(u64::MAX as u128) as u64);

            let used = i.volume.as_ref().and_then(|v| v.used).map(|(u, _)| u);
            if let Some(used) = used.or(i.disk_used_bytes) {
                seen.used_byte_ms += used as u128 * dt_ms;
                let whole = seen.used_byte_ms / (MIB * 1000);
                seen.used_byte_ms %= MIB * 1000;
                meters.disk_used_mib_seconds = meters
                    .disk_used_mib_seconds
                    .saturating_add(whole.min(u64::MAX as u128) as u64);
            }
        }
    }

    /// Writes meters.json (validated, atomically).
    pub fn save(&self) -> Result<(), WriteError> {
        let ledger = HostMeterLedger {
            host_id: self.host_id.clone(),
            saved_at: Timestamp::now(),
            apps: self
                .apps
                .iter()
                .map(|(app_id, meters)| AppMeters {
                    app_id: app_id.clone(),
                    meters: meters.clone(),
                })
                .collect(),
        };
        write_document(&self.path, &ledger).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::observation::VolumeStatus;
    use std::time::Duration;

    fn instance(state: InstanceState, cpu_ms: u64) -> InstanceStatus {
        InstanceStatus {
            app_id: "a".parse().unwrap(),
            deployment_id: "d".parse().unwrap(),
            state,
            resources: fleetwire_types::InstanceResources {
                vcpu_count: std::num::NonZeroU64::new(1).unwrap(),
                memory_mib: std::num::NonZeroU64::new(64).unwrap(),
                disk_mib: 10,
            },
            restart_count: 0,
            last_restart: None,
            last_exit_code: None,
            started_at: None,
            compute: None,
            cpu_ms,
            message: None,
            volume: Some(VolumeStatus {
                path: "/v".into(),
                size_bytes: 10 << 20,
                used: Some((1 << 20, Timestamp::now())),
            }),
            disk_used_bytes: None,
            pid: None,
            host_ports: Vec::new(),
            guest_ipv4: None,
            last_healthy_at: None,
            rx_bytes: 0,
            tx_bytes: 0,
        }
    }

    #[test]
    fn accrues_by_state_keeps_fractions_and_survives_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meters.json");
        let host: HostId = "h".parse().unwrap();
        let mut book = MeterBook::load(
            path.clone(),
            host.clone(),
            &dir.path().join("reported.json"),
        );
        let t0 = Instant::now();
        book.observe(&[instance(InstanceState::Running, 100)], t0);
        // 1.5 s running, then 0.5 s stopped; the driver's CPU count restarts (a new agent run).
        book.observe(
            &[instance(InstanceState::Running, 250)],
            t0 + Duration::from_millis(1500),
        );
        book.observe(
            &[instance(InstanceState::Stopped, 30)],
            t0 + Duration::from_millis(2000),
        );
        let m = book.all()[&"a".parse::<AppId>().unwrap()].clone();
        assert_eq!((m.running_ms, m.idle_ms), (1500, 500));
        assert_eq!(m.cpu_ms, 100 + 150 + 30);
        // 10 MiB for 2 s; 1 MiB used for 2 s.
        assert_eq!(m.disk_provisioned_mib_seconds, 20);
        assert_eq!(m.disk_used_mib_seconds, 2);
        book.save().unwrap();

        let reloaded = MeterBook::load(path, host, &dir.path().join("reported.json"));
        assert_eq!(reloaded.all()[&"a".parse::<AppId>().unwrap()], m);
    }

    #[test]
    fn byte_counts_accrue_as_deltas_and_a_count_starting_over_adds_all_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut book = MeterBook::load(
            dir.path().join("meters.json"),
            "h".parse().unwrap(),
            &dir.path().join("reported.json"),
        );
        let t0 = Instant::now();
        let counted = |rx, tx| InstanceStatus {
            rx_bytes: rx,
            tx_bytes: tx,
            ..instance(InstanceState::Running, 0)
        };
        book.observe(&[counted(1000, 200)], t0);
        book.observe(&[counted(1500, 260)], t0 + Duration::from_secs(1));
        // The tap device was made again: its count starts over.
        book.observe(&[counted(40, 4)], t0 + Duration::from_secs(2));
        let m = &book.all()[&"a".parse::<AppId>().unwrap()];
        assert_eq!((m.rx_bytes, m.tx_bytes), (1540, 264));
    }
}
