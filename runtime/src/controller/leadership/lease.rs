//! The leader lease ([`spawn`]): one row of `controller_lease` (migration 6), taken and renewed
//! on a connection of its own by a thread of its own, by the database's clock only. What the
//! thread finds is published as a [`Role`] on a watch channel the server follows.
//!
//! Fast path for a killed leader (docs/controller.md, "Several controllers"): the leader of
//! epoch E holds the session-level advisory lock (schema, E) on its lease connection.
//! PostgreSQL releases it the moment that connection dies, so a standby that can take (schema,
//! E) knows the leader is gone and takes over without waiting for the lease to expire. A paused
//! leader keeps its connection and its lock: then only expiry lets a standby in, and the fence
//! (`store::postgres::Fence`) refuses the paused one's writes once it runs again. One lock per
//! epoch, taken before the new epoch is committed, so a standby can never mistake a live new
//! leader for a dead one.

use std::time::{Duration, Instant};

use postgres::Client;
use tokio::sync::watch;

use crate::store::postgres::connect_client;
use crate::store::StoreError;

/// What this controller is, as the lease thread last found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Another controller leads (its `leader_url`), or none does (`None`).
    Standby { leader_url: Option<String> },
    /// This controller holds the lease of `epoch`: the fencing token of its store.
    Leader { epoch: i64 },
}

/// What the lease thread needs.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The database URL (it may hold a password: never logged).
    pub url: String,
    /// This controller's instance id: the `holder` of the lease row.
    pub holder: String,
    /// Where other controllers redirect to while this one leads.
    pub leader_url: String,
    pub ttl: Duration,
}

/// The lock key of this schema's lease: tests run many schemas in one database.
const SCHEMA_KEY: &str = "hashtext('fleetwire:lease:' || current_schema())";

/// Spawns the lease thread; its first finding is on the channel before this returns.
pub fn spawn(config: LeaseConfig) -> watch::Receiver<Role> {
    let (tx, rx) = watch::channel(Role::Standby { leader_url: None });
    std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || run(config, tx))
        .expect("a thread can be spawned");
    rx
}

fn run(config: LeaseConfig, tx: watch::Sender<Role>) {
    let period = config.ttl / 5;
    let mut client: Option<Client> = None;
    let mut leading: Option<Leading> = None;
    loop {
        let started = Instant::now();
        if client.as_ref().is_none_or(Client::is_closed) {
            if leading.take().is_some() {
                // Its advisory lock went with the connection: a standby may lead already.
                tracing::error!("LEADERSHIP LOST: the lease connection closed; standing by");
            }
            client = match connect(&config) {
                Ok(c) => Some(c),
                Err(error) => {
                    tracing::warn!("the leader lease: {error}; retrying");
                    None
                }
            };
        }
        let role = match (client.as_mut(), leading.take()) {
            (None, _) => Role::Standby { leader_url: None },
            (Some(c), Some(lead)) => match renew(c, &config, lead.epoch) {
                Ok(true) => {
                    leading = Some(Leading {
                        epoch: lead.epoch,
                        renewed: started,
                    });
                    Role::Leader { epoch: lead.epoch }
                }
                Ok(false) => {
                    tracing::error!(
                        epoch = lead.epoch,
                        "LEADERSHIP LOST: the lease expired or another controller took it; standing by"
                    );
                    unlock(c, lead.epoch);
                    Role::Standby { leader_url: None }
                }
                Err(error) if lead.renewed.elapsed() < config.ttl && !c.is_closed() => {
                    tracing::warn!(epoch = lead.epoch, "renewing the lease: {error}; retrying");
                    leading = Some(lead);
                    Role::Leader { epoch: lead.epoch }
                }
                Err(error) => {
                    tracing::error!(
                        epoch = lead.epoch,
                        "LEADERSHIP LOST: the lease could not be renewed before its end ({error}); standing by"
                    );
                    if !c.is_closed() {
                        unlock(c, lead.epoch);
                    }
                    Role::Standby { leader_url: None }
                }
            },
            (Some(c), None) => match try_acquire(c, &config) {
                Ok(Acquired::Leader(epoch)) => {
                    tracing::info!(epoch, holder = %config.holder, "took the leader lease");
                    leading = Some(Leading {
                        epoch,
                        renewed: started,
                    });
                    Role::Leader { epoch }
                }
                Ok(Acquired::Standby(leader_url)) => Role::Standby { leader_url },
                Err(error) => {
                    tracing::warn!("reading the leader lease: {error}");
                    Role::Standby { leader_url: None }
                }
            },
        };
        tx.send_if_modified(|current| {
            let changed = *current != role;
            *current = role;
            changed
        });
        if tx.is_closed() {
            return;
        }
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
}

#[derive(Debug, Clone, Copy)]
struct Leading {
    epoch: i64,
    /// When the last successful renewal (or the acquisition) was sent: the lease runs at least
    /// `ttl` from then, by the database's clock.
    renewed: Instant,
}

fn connect(config: &LeaseConfig) -> Result<Client, StoreError> {
    let mut client = connect_client(&config.url)?;
    // A statement that hangs must not outlast the lease it renews.
    let timeout = (config.ttl / 2).as_millis().max(1);
    client
        .batch_execute(&format!("SET statement_timeout = {timeout}"))
        .map_err(|e| StoreError::postgres("set the lease connection's statement timeout", e))?;
    Ok(client)
}

enum Acquired {
    Leader(i64),
    Standby(Option<String>),
}

fn ttl_ms(config: &LeaseConfig) -> i64 {
    i64::try_from(config.ttl.as_millis()).unwrap_or(i64::MAX)
}

/// One attempt: takes the lease when it is free (no row, expired, or its holder's connection
/// gone), else says who holds it. Candidates queue on the row lock, so one wins per epoch.
fn try_acquire(client: &mut Client, config: &LeaseConfig) -> Result<Acquired, StoreError> {
    let err = |doing| move |e| StoreError::postgres(doing, e);
    let mut tx = client.transaction().map_err(err("begin the lease"))?;
    let current = tx
        .query_opt(
            "SELECT epoch, leader_url, expires_at < now() FROM controller_lease WHERE id = 1 FOR UPDATE",
            &[],
        )
        .map_err(err("read the lease"))?;
    let (epoch, holder_gone, leader_url) = match current {
        None => (0_i64, true, None),
        Some(row) => {
            let epoch: i64 = row.get(0);
            let expired: bool = row.get(2);
            // Taken only when its holder's connection is gone; given back at once.
            let dead: bool = tx
                .query_one(
                    &format!(
                        "SELECT pg_try_advisory_lock({SCHEMA_KEY}, $1::bigint::int4) AND pg_advisory_unlock({SCHEMA_KEY}, $1::bigint::int4)"
                    ),
                    &[&(epoch % i64::from(i32::MAX))],
                )
                .map_err(err("check whether the leader's connection lives"))?
                .get(0);
            (epoch, expired || dead, Some(row.get::<_, String>(1)))
        }
    };
    if !holder_gone {
        return Ok(Acquired::Standby(leader_url));
    }
    let next = epoch + 1;
    let locked: bool = tx
        .query_one(
            &format!("SELECT pg_try_advisory_lock({SCHEMA_KEY}, $1::bigint::int4)"),
            &[&(next % i64::from(i32::MAX))],
        )
        .map_err(err("take the leader's advisory lock"))?
        .get(0);
    if !locked {
        return Ok(Acquired::Standby(None));
    }
    let taken = tx
        .query_opt(
            "INSERT INTO controller_lease AS l (id, holder, leader_url, epoch, expires_at)
             VALUES (1, $1, $2, $3, now() + $4 * interval '1 millisecond')
             ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder,
                 leader_url = EXCLUDED.leader_url, epoch = l.epoch + 1,
                 expires_at = EXCLUDED.expires_at
             WHERE l.epoch = $3 - 1
             RETURNING epoch",
            &[
                &config.holder,
                &config.leader_url,
                &next,
                &(ttl_ms(config) as f64),
            ],
        )
        .map_err(err("take the lease"))?;
    tx.commit().map_err(err("commit the lease"))?;
    match taken {
        Some(row) => Ok(Acquired::Leader(row.get(0))),
        None => {
            unlock(client, next);
            Ok(Acquired::Standby(None))
        }
    }
}

/// Extends the lease by `ttl` from the database's now, if this holder still has it unexpired.
fn renew(client: &mut Client, config: &LeaseConfig, epoch: i64) -> Result<bool, StoreError> {
    let rows = client
        .execute(
            "UPDATE controller_lease SET expires_at = now() + $3 * interval '1 millisecond'
             WHERE id = 1 AND holder = $1 AND epoch = $2 AND expires_at > now()",
            &[&config.holder, &epoch, &(ttl_ms(config) as f64)],
        )
        .map_err(|e| StoreError::postgres("renew the lease", e))?;
    Ok(rows == 1)
}

fn unlock(client: &mut Client, epoch: i64) {
    if let Err(error) = client.execute(
        &format!("SELECT pg_advisory_unlock({SCHEMA_KEY}, $1::bigint::int4)"),
        &[&(epoch % i64::from(i32::MAX))],
    ) {
        tracing::warn!(%error, "releasing the advisory lock of a lost lease");
    }
}
