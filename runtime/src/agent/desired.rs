//! desired.json: the host's intent. Replaced atomically by the local API, or by an operator by
//! hand (noticed by [`DesiredStore::poll`]). A document that is not a readable desired-state
//! document for this host is refused: the last accepted one stays in force and the refusal is
//! reported as reported.json's `message` until a readable document is taken up.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use fleetwire_types::{HostDesiredState, HostId, JsonPointer, Violation};

use crate::document_file::{write_document, WriteError};

/// Why a desired-state document was not taken up; the document in force stays. The local API
/// answers it (`From<DesiredError> for ApiFailure`, `local_api`).
#[derive(Debug, thiserror::Error)]
pub enum DesiredError {
    /// It breaks a rule the schema cannot state: it is another host's, its ids are not unique,
    /// or an instance names nothing to run. Never empty.
    #[error(
        "not a desired-state document for this host: {}",
        fleetwire_types::describe(&.0[0])
    )]
    NotForThisHost(Vec<Violation>),
    /// desired.json could not be written (it stays as it was).
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl DesiredError {
    /// The violations that refused the document, each with its pointer (none for an I/O
    /// failure).
    pub fn violations(&self) -> &[Violation] {
        match self {
            DesiredError::NotForThisHost(violations) => violations,
            DesiredError::Write(WriteError::Invalid { violations, .. }) => violations,
            DesiredError::Write(WriteError::Io { .. }) => &[],
        }
    }
}

/// The identity of a file version: any replacement or edit changes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        ino: m.ino(),
        len: m.len(),
        mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
    })
}

pub struct DesiredStore {
    path: PathBuf,
    host_id: HostId,
    current: RwLock<Arc<HostDesiredState>>,
    refusal: RwLock<Option<String>>,
    /// Serializes writers; readers never wait on it.
    writer: tokio::sync::Mutex<()>,
    seen: Mutex<Option<FileStamp>>,
}

fn read_lock<T: Clone>(l: &RwLock<T>) -> T {
    l.read().unwrap_or_else(|p| p.into_inner()).clone()
}

fn set<T>(l: &RwLock<T>, value: T) {
    *l.write().unwrap_or_else(|p| p.into_inner()) = value;
}

fn violation(pointer: &str, keyword: &str, message: String) -> Violation {
    Violation {
        instance_path: pointer.parse::<JsonPointer>().expect("a JSON pointer"),
        schema_path: "".parse::<JsonPointer>().expect("the empty pointer"),
        keyword: keyword.to_string(),
        message,
    }
}

impl DesiredStore {
    /// Opens `path`, creating an empty document for `host_id` when there is none. A file that
    /// is there but refused leaves the host with no instances and the refusal as its message.
    pub fn open(path: PathBuf, host_id: HostId) -> Result<DesiredStore, WriteError> {
        let empty = HostDesiredState {
            host_id: host_id.clone(),
            generation: Some(0),
            instances: Vec::new(),
        };
        let store = DesiredStore {
            path,
            host_id,
            current: RwLock::new(Arc::new(empty.clone())),
            refusal: RwLock::new(None),
            writer: tokio::sync::Mutex::new(()),
            seen: Mutex::new(None),
        };
        if !store.path.exists() {
            write_document(&store.path, &empty)?;
        }
        store.poll();
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The document in force.
    pub fn current(&self) -> Arc<HostDesiredState> {
        read_lock(&self.current)
    }

    /// Why the last document given was refused, while it is.
    pub fn refusal(&self) -> Option<String> {
        read_lock(&self.refusal)
    }

    /// Records a refusal (a bad `PUT /v1/desired` body, say): the document in force stays.
    /// The refusal is told by its first violation, or by `message` when it has none.
    pub fn refuse(&self, source: &str, violations: &[Violation], message: &str) {
        let why = match violations.first() {
            Some(v) => {
                let more = violations.len() - 1;
                let first = fleetwire_types::describe(v);
                if more > 0 {
                    format!("{first} (and {more} more)")
                } else {
                    first
                }
            }
            None => message.to_string(),
        };
        let message = format!("{source} refused, still running the previous document: {why}");
        tracing::warn!("{message}");
        set(&self.refusal, Some(message));
    }

    /// Checks what the schema cannot: the document is for this host, its ids are unique, and
    /// each instance names something to run (an image needs network: `workload`).
    pub fn check(&self, doc: &HostDesiredState) -> Result<(), DesiredError> {
        let mut violations = Vec::new();
        if doc.host_id != self.host_id {
            violations.push(violation(
                "/hostId",
                "hostId",
                format!(
                    "the document is for host {:?}, this is {:?}",
                    doc.host_id.as_str(),
                    self.host_id.as_str()
                ),
            ));
        }
        let mut apps: HashMap<&str, usize> = HashMap::new();
        let mut vms: HashMap<&str, usize> = HashMap::new();
        for (i, inst) in doc.instances.iter().enumerate() {
            if let Some(first) = apps.insert(inst.app_id.as_str(), i) {
                violations.push(violation(
                    &format!("/instances/{i}/appId"),
                    "uniqueAppId",
                    format!(
                        "appId {:?} is already used by /instances/{first}",
                        inst.app_id.as_str()
                    ),
                ));
            }
            let at = format!("/instances/{i}");
            violations.extend(crate::workload::command_or_image(
                &at,
                crate::workload::Workload {
                    image: inst.image.is_some(),
                    command: inst.command.is_some(),
                    machine: inst.boot.is_some() || inst.disk_image.is_some(),
                },
            ));
            violations.extend(crate::workload::one_boot_source(
                &at,
                inst.image.is_some(),
                inst.boot.is_some(),
                inst.disk_image.is_some().then_some("diskImage"),
            ));
            violations.extend(crate::workload::image_network(
                &at,
                inst.image.as_ref().map(|i| i.as_str()),
                inst.network,
            ));
            if let Some(vm) = &inst.vm_id {
                if let Some(first) = vms.insert(vm.as_str(), i) {
                    violations.push(violation(
                        &format!("/instances/{i}/vmId"),
                        "uniqueVmId",
                        format!(
                            "vmId {:?} is already used by /instances/{first}",
                            vm.as_str()
                        ),
                    ));
                }
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(DesiredError::NotForThisHost(violations))
        }
    }

    /// Takes `doc` up: checked, written atomically, put in force, refusal cleared.
    pub async fn replace(
        &self,
        doc: HostDesiredState,
    ) -> Result<Arc<HostDesiredState>, DesiredError> {
        let _writing = self.writer.lock().await;
        self.install(doc)
    }

    /// Applies `change` to the document in force and takes the result up, its generation
    /// increased. `change` may refuse with its caller's own error.
    pub async fn update<R, E: From<DesiredError>>(
        &self,
        change: impl FnOnce(&mut HostDesiredState) -> Result<R, E>,
    ) -> Result<R, E> {
        let _writing = self.writer.lock().await;
        let mut doc = (*self.current()).clone();
        let result = change(&mut doc)?;
        doc.generation = Some(doc.generation.unwrap_or(0).saturating_add(1));
        self.install(doc)?;
        Ok(result)
    }

    fn install(&self, doc: HostDesiredState) -> Result<Arc<HostDesiredState>, DesiredError> {
        self.check(&doc)?;
        write_document(&self.path, &doc)?;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = stamp(&self.path);
        let doc = Arc::new(doc);
        set(&self.current, doc.clone());
        set(&self.refusal, None);
        Ok(doc)
    }

    /// Looks at the file: when it changed since last seen, reads it and takes it up or
    /// refuses it. Returns whether anything changed. Cheap when nothing did (one `stat`).
    pub fn poll(&self) -> bool {
        let now = stamp(&self.path);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if *seen == now && seen.is_some() {
                return false;
            }
            *seen = now;
        }
        let source = "desired.json";
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) => {
                let message = format!("cannot read {}: {e}", self.path.display());
                self.refuse(source, &[], &message);
                return true;
            }
        };
        let read = fleetwire_types::read::<HostDesiredState>(&bytes).map(|accepted| {
            crate::unknown_fields::note(&accepted, source);
            accepted.value
        });
        match read {
            Ok(doc) if *self.current() == doc && self.refusal().is_none() => false,
            Ok(doc) => match self.check(&doc) {
                Ok(()) => {
                    tracing::info!(generation = ?doc.generation, "desired.json taken up");
                    set(&self.current, Arc::new(doc));
                    set(&self.refusal, None);
                    true
                }
                Err(refusal) => {
                    self.refuse(source, refusal.violations(), &refusal.to_string());
                    true
                }
            },
            Err(rejection) => {
                self.refuse(source, rejection.violations(), &rejection.to_string());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(json: serde_json::Value) -> HostDesiredState {
        serde_json::from_value(json).unwrap()
    }

    #[tokio::test]
    async fn a_document_for_another_host_is_refused_with_its_pointers_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            DesiredStore::open(dir.path().join("desired.json"), "n1".parse().unwrap()).unwrap();
        let before = std::fs::read(store.path()).unwrap();
        let refusal = store
            .replace(doc(serde_json::json!({"hostId": "n2", "instances": []})))
            .await
            .unwrap_err();
        assert!(matches!(refusal, DesiredError::NotForThisHost(_)));
        assert!(
            refusal
                .to_string()
                .starts_with("not a desired-state document for this host: "),
            "{refusal}"
        );
        let pointers: Vec<_> = refusal
            .violations()
            .iter()
            .map(|v| v.instance_path.as_str())
            .collect();
        assert_eq!(pointers, ["/hostId"]);
        assert_eq!(std::fs::read(store.path()).unwrap(), before);

        store.refuse("PUT /v1/desired", refusal.violations(), "");
        assert!(store
            .refusal()
            .unwrap()
            .starts_with("PUT /v1/desired refused, still running the previous document: "));
        store
            .replace(doc(serde_json::json!({"hostId": "n1", "instances": []})))
            .await
            .unwrap();
        assert_eq!(store.refusal(), None);
    }
}
