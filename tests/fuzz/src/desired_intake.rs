//! Target 2: the agent's desired-state intake. The input is written as desired.json and an
//! agent's `DesiredStore` is opened on it, which reads it as the agent does at start and on
//! every change (`DesiredStore::poll`: the validated reader, then the checks the schema cannot
//! state); a document taken up is then replaced through `DesiredStore::replace`, the local
//! API's `PUT /v1/desired`.
//!
//! The store's host is the document's own `hostId` when it has a readable one, so that
//! documents get past the host check and into the per-instance checks.
//!
//! Properties:
//! - reading never changes the file: a refused document is not overwritten;
//! - a document is in force exactly when the reader and the store's checks accept it, and is
//!   then the typed document read; otherwise the document in force stays the empty one and the
//!   refusal is reported, naming desired.json;
//! - the document in force is always for this host, with unique app and VM ids;
//! - a document taken up and written back by `replace` reads back strictly, equal, and a store
//!   opened on the written file takes it up unchanged.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use fleetwire::agent::desired::{DesiredError, DesiredStore};
use fleetwire_types::{HostDesiredState, HostId};

struct Scratch {
    _dir: tempfile::TempDir,
    path: PathBuf,
    runtime: tokio::runtime::Runtime,
}

fn scratch() -> &'static Scratch {
    static SCRATCH: OnceLock<Scratch> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = dir.path().join("desired.json");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        Scratch {
            _dir: dir,
            path,
            runtime,
        }
    })
}

/// Makes the scratch directory and runtime once, before the fuzzer's loop.
pub fn prepare() {
    scratch();
}

/// The host the store is opened for: the document's own `hostId` when readable.
fn host_of(data: &[u8]) -> HostId {
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|doc| doc.get("hostId")?.as_str()?.parse::<HostId>().ok())
        .unwrap_or_else(|| "host-01".parse().expect("a host id"))
}

fn empty(host: &HostId) -> HostDesiredState {
    HostDesiredState {
        host_id: host.clone(),
        generation: Some(0),
        instances: Vec::new(),
    }
}

pub fn check(data: &[u8]) {
    let scratch = scratch();
    let path = &scratch.path;
    std::fs::write(path, data).expect("writing the scratch desired.json");
    let host = host_of(data);
    let store = DesiredStore::open(path.clone(), host.clone()).expect("desired.json exists");
    assert_eq!(
        std::fs::read(path).expect("reading desired.json"),
        data,
        "reading desired.json changed it"
    );
    let current = store.current();
    assert_in_force_is_sound(&current, &host);

    let read = fleetwire_types::read::<HostDesiredState>(data).map(|a| a.value);
    let checked = read.as_ref().ok().map(|doc| store.check(doc));
    match (&read, &checked) {
        (Ok(doc), Some(Ok(()))) => {
            assert_eq!(*current, *doc, "the document taken up is not the one read");
            assert_eq!(
                store.refusal(),
                None,
                "a document taken up is still refused"
            );
            check_replaced(scratch, &store, doc.clone(), &host);
        }
        _ => {
            assert_eq!(
                *current,
                empty(&host),
                "a refused document was put in force"
            );
            let refusal = store.refusal().expect("a refused document is reported");
            assert!(
                refusal.starts_with("desired.json refused, still running the previous document: "),
                "{refusal}"
            );
            if let (Ok(doc), Some(Err(why))) = (&read, &checked) {
                assert!(matches!(why, DesiredError::NotForThisHost(v) if !v.is_empty()));
                // The local API's path refuses it too, and leaves the file as it was.
                let refused = scratch.runtime.block_on(store.replace(doc.clone()));
                assert!(refused.is_err(), "replace takes up what the check refused");
                assert_eq!(std::fs::read(path).expect("reading desired.json"), data);
            }
        }
    }
}

/// What the store holds in force is for this host, with unique app and VM ids.
fn assert_in_force_is_sound(doc: &HostDesiredState, host: &HostId) {
    assert_eq!(
        &doc.host_id, host,
        "the document in force is another host's"
    );
    let mut apps = HashSet::new();
    let mut vms = HashSet::new();
    for inst in &doc.instances {
        assert!(apps.insert(inst.app_id.as_str()), "appId twice in force");
        if let Some(vm) = &inst.vm_id {
            assert!(vms.insert(vm.as_str()), "vmId twice in force");
        }
    }
}

/// `replace` writes the document; the file reads back strictly as it, and a store opened on
/// it takes it up unchanged.
fn check_replaced(scratch: &Scratch, store: &DesiredStore, doc: HostDesiredState, host: &HostId) {
    let replaced = scratch
        .runtime
        .block_on(store.replace(doc.clone()))
        .unwrap_or_else(|e| panic!("replace refuses a document the intake took up: {e}"));
    assert_eq!(*replaced, doc);
    let written = std::fs::read(&scratch.path).expect("reading desired.json");
    let back = fleetwire_types::read_strict::<HostDesiredState>(&written)
        .unwrap_or_else(|r| panic!("the written desired.json is refused: {r}"));
    assert_eq!(
        back, doc,
        "desired.json reads back different from what was written"
    );
    let reopened =
        DesiredStore::open(scratch.path.clone(), host.clone()).expect("desired.json exists");
    assert_eq!(*reopened.current(), doc);
    assert_eq!(reopened.refusal(), None);
}
