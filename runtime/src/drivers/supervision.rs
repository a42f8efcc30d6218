//! The machine set of a driver whose machines each have a supervisor task (process, qemu): what
//! a supervisor is asked for (`Control`), the driver's handle on one (`Machine`), and the one
//! converge of the set on the desired instances (docs/agent.md, "Drivers"). The drivers differ
//! in what a machine boots from (their `BootSpec`) and in what their supervisors do; how
//! machines are started, replaced, retired and stopped is this module's alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fleetwire_types::{AppId, DesiredInstance, DesiredInstanceState, InstanceState, RestartPolicy};

use super::observation::InstanceStatus;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a machine's supervisor is asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Control {
    pub want: Want,
    pub policy: RestartPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Running,
    Stopped,
    /// Removed from the desired document: stop, delete the machine's files, end the supervisor.
    Gone,
}

impl Control {
    /// What the desired instance asks its supervisor for.
    pub fn of(d: &DesiredInstance) -> Control {
        Control {
            want: match d.desired_state {
                DesiredInstanceState::Running => Want::Running,
                DesiredInstanceState::Stopped => Want::Stopped,
            },
            policy: d.restart_policy.clone().unwrap_or_default(),
        }
    }
}

/// Waits until `ok` takes the control's want, and returns it. `None` means the machine is gone
/// (removed, or the driver dropped the sender).
pub(crate) async fn wait_for_want(
    control: &mut watch::Receiver<Control>,
    mut ok: impl FnMut(Want) -> bool,
) -> Option<Want> {
    loop {
        let want = control.borrow_and_update().want;
        if ok(want) {
            return Some(want);
        }
        if control.changed().await.is_err() {
            return None;
        }
    }
}

/// The driver's handle on one supervised machine: what `observe` reads (`watched`), what it
/// boots from (`spec`, a change means a fresh boot), and its supervisor.
pub(crate) struct Machine<S, W> {
    pub watched: Arc<W>,
    pub spec: S,
    pub control: watch::Sender<Control>,
    pub task: JoinHandle<()>,
}

/// A driver's machines: the desired ones by app, and the ones no longer desired, reported as
/// `stopping` until their supervisor has ended.
pub(crate) struct Machines<S, W> {
    current: Mutex<HashMap<AppId, Machine<S, W>>>,
    retiring: Mutex<Vec<Machine<S, W>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<S: PartialEq, W> Machines<S, W> {
    pub fn new() -> Machines<S, W> {
        Machines {
            current: Mutex::new(HashMap::new()),
            retiring: Mutex::new(Vec::new()),
        }
    }

    /// Adds a machine that is only to be retired (one no desired document names any more).
    pub fn retire(&self, machine: Machine<S, W>) {
        lock(&self.retiring).push(machine);
    }

    /// Moves the set towards `desired`: a machine no longer desired is told it is gone and
    /// retired; one whose spec is unchanged gets the new control; one that is new, or whose
    /// spec changed (a new deployment is a fresh boot), gets a new supervisor from `start`,
    /// which is handed the old supervisor (told to stop) to wait for first.
    pub fn converge(
        &self,
        desired: &[DesiredInstance],
        spec_of: impl Fn(&DesiredInstance) -> S,
        mut start: impl FnMut(&DesiredInstance, S, Control, Option<JoinHandle<()>>) -> Machine<S, W>,
    ) {
        let mut machines = lock(&self.current);
        let mut retiring = lock(&self.retiring);
        retiring.retain(|m| !m.task.is_finished());
        let wanted: HashMap<&AppId, &DesiredInstance> =
            desired.iter().map(|d| (&d.app_id, d)).collect();
        let gone: Vec<AppId> = machines
            .keys()
            .filter(|id| !wanted.contains_key(id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(m) = machines.remove(&id) {
                m.control.send_modify(|c| c.want = Want::Gone);
                retiring.push(m);
            }
        }
        for d in desired {
            let control = Control::of(d);
            let spec = spec_of(d);
            match machines.get(&d.app_id) {
                Some(m) if m.spec == spec => {
                    m.control.send_if_modified(|c| {
                        let changed = *c != control;
                        *c = control;
                        changed
                    });
                }
                _ => {
                    let predecessor = machines.remove(&d.app_id).map(|old| {
                        old.control.send_modify(|c| c.want = Want::Stopped);
                        drop(old.control);
                        old.task
                    });
                    let m = start(d, spec, control, predecessor);
                    machines.insert(d.app_id.clone(), m);
                }
            }
        }
    }

    /// One look at every machine, read with no lock of the set held: `status_of` each desired
    /// one, and each retired one still stopping (told so), as `stopping`; sorted by app. The
    /// desired machines come back too.
    pub fn observe(
        &self,
        status_of: impl Fn(&W, bool) -> InstanceStatus,
    ) -> (Vec<Arc<W>>, Vec<InstanceStatus>) {
        let current: Vec<Arc<W>> = lock(&self.current)
            .values()
            .map(|m| m.watched.clone())
            .collect();
        let stopping: Vec<Arc<W>> = lock(&self.retiring)
            .iter()
            .filter(|m| !m.task.is_finished())
            .map(|m| m.watched.clone())
            .collect();
        let mut instances: Vec<InstanceStatus> =
            current.iter().map(|m| status_of(m, false)).collect();
        instances.extend(stopping.iter().map(|m| InstanceStatus {
            state: InstanceState::Stopping,
            ..status_of(m, true)
        }));
        instances.sort_by(|a, b| a.app_id.cmp(&b.app_id));
        (current, instances)
    }

    /// Tells every desired machine to stop (Stopped, not Gone: an agent going away keeps its
    /// machines' files; they stay listed, so the last reported.json shows them stopped), then
    /// waits until no machine, retiring ones too, `runs`, for `within` at the most.
    pub async fn stop_all(&self, within: Duration, runs: impl Fn(&W) -> bool) {
        let all: Vec<Arc<W>> = lock(&self.current)
            .values()
            .map(|m| {
                m.control.send_modify(|c| c.want = Want::Stopped);
                m.watched.clone()
            })
            .chain(lock(&self.retiring).iter().map(|m| m.watched.clone()))
            .collect();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && all.iter().any(|m| runs(m)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
