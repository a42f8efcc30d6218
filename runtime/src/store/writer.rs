//! The store's single writer thread: heartbeat-derived changes are written behind in batches
//! (one transaction per batch, at most one flush interval after the change), and commits that
//! a request waits for are written at once, in the same order as everything else.
//!
//! The writer never receives row contents: it receives node ids and reads each node's current
//! state when it writes, through the `snapshot` function the controller gives it. Because one
//! thread does every write and each write reads the newest state, a row in the store is never
//! older than one written before it.
//!
//! Write-behind nodes are collected in a shared list rather than sent one by one: only the
//! first of a batch wakes the writer (to start the flush timer). Waking a thread per
//! heartbeat cost more than the heartbeat's own work. What the list holds is the source's
//! choice ([`Source::Key`]): a node id, or a handle that spares the writer a lookup.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::{Durability, NodeWrite, Store, StoreError};

/// Where the writer reads what to write, and reports what it wrote.
pub trait Source: Send + 'static {
    /// How a node is queued for write-behind; commits name nodes by id (`From<String>`).
    type Key: From<String> + Send + 'static;
    /// A node's current state: `Upsert` (or `Seen`) while the controller knows the node,
    /// `Delete` once it has forgotten it; `None` when there is nothing to write (the
    /// controller itself is gone). Also clears the node's "queued for write-behind" mark.
    fn snapshot(&self, node: &Self::Key) -> Option<NodeWrite>;
    /// These writes are now in the store.
    fn written(&self, writes: &[NodeWrite]);
}

pub type Snapshot<K> = Box<dyn Source<Key = K>>;

/// Told how long each flush took and how many rows it wrote.
pub type FlushObserver = Box<dyn Fn(Duration, usize) + Send>;

/// Where a commit's outcome is sent.
type CommitReply = oneshot::Sender<Result<(), StoreError>>;

enum Command {
    /// The shared dirty list was empty and is not any more: start the flush timer.
    Dirty,
    Commit {
        node_ids: Vec<String>,
        reply: CommitReply,
    },
    Check(oneshot::Sender<Result<(), StoreError>>),
    Shutdown(oneshot::Sender<()>),
}

/// The handle the controller talks to the writer through. Cheap to clone.
pub struct WriterHandle<K> {
    tx: mpsc::Sender<Command>,
    /// Nodes queued for the next write-behind batch.
    dirty: Arc<Mutex<Vec<K>>>,
}

impl<K> Clone for WriterHandle<K> {
    fn clone(&self) -> Self {
        WriterHandle {
            tx: self.tx.clone(),
            dirty: self.dirty.clone(),
        }
    }
}

/// The running writer thread.
pub struct Writer<K> {
    pub handle: WriterHandle<K>,
    thread: Option<JoinHandle<()>>,
}

impl<K: From<String> + Send + 'static> Writer<K> {
    /// Starts the writer thread over `store`. Changes marked dirty reach the store within
    /// `flush_interval`.
    pub fn start(
        store: Box<dyn Store>,
        snapshot: Snapshot<K>,
        on_flush: FlushObserver,
        flush_interval: Duration,
    ) -> Writer<K> {
        let (tx, rx) = mpsc::channel();
        let dirty: Arc<Mutex<Vec<K>>> = Arc::default();
        let shared = dirty.clone();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                WriterLoop {
                    store,
                    snapshot,
                    on_flush,
                    flush_interval,
                    dirty: shared,
                    spare: Vec::new(),
                    retry: Vec::new(),
                    writes: Vec::new(),
                    commits: Vec::new(),
                    flush_due: None,
                    last_flush: Duration::ZERO,
                }
                .run(rx)
            })
            .expect("spawning the store writer thread");
        Writer {
            handle: WriterHandle { tx, dirty },
            thread: Some(thread),
        }
    }

    /// Writes everything still pending and stops the thread.
    pub async fn shutdown(mut self) {
        let (reply, done) = oneshot::channel();
        if self.handle.tx.send(Command::Shutdown(reply)).is_ok() {
            let _ = done.await;
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl<K> WriterHandle<K> {
    /// Queues `node` for the next write-behind batch. Call once per change window: the
    /// controller keeps a per-node mark so a node is queued at most once until written.
    pub fn mark_dirty(&self, node: K) {
        let first = {
            let mut dirty = self.dirty.lock();
            dirty.push(node);
            dirty.len() == 1
        };
        if first {
            // A closed channel means the process is shutting down; the final flush already ran.
            let _ = self.tx.send(Command::Dirty);
        }
    }

    /// Writes the current state of `node_ids` (and everything else pending) and waits until
    /// the transaction has committed.
    pub async fn commit(&self, node_ids: Vec<String>) -> Result<(), StoreError> {
        let (reply, done) = oneshot::channel();
        self.tx
            .send(Command::Commit { node_ids, reply })
            .map_err(|_| StoreError("the store writer has stopped".into()))?;
        done.await
            .map_err(|_| StoreError("the store writer stopped before committing".into()))?
    }

    /// Asks the store whether it answers, through the writer (so a wedged writer shows too).
    pub async fn check(&self) -> Result<(), StoreError> {
        let (reply, done) = oneshot::channel();
        self.tx
            .send(Command::Check(reply))
            .map_err(|_| StoreError("the store writer has stopped".into()))?;
        done.await
            .map_err(|_| StoreError("the store writer stopped before answering".into()))?
    }
}

struct WriterLoop<K> {
    store: Box<dyn Store>,
    snapshot: Snapshot<K>,
    on_flush: FlushObserver,
    flush_interval: Duration,
    dirty: Arc<Mutex<Vec<K>>>,
    /// The dirty list of the previous flush, emptied, swapped in for the next one: the lists
    /// and the batch keep their capacity from flush to flush.
    spare: Vec<K>,
    /// Nodes of a failed batch, written again with the next one.
    retry: Vec<String>,
    writes: Vec<NodeWrite>,
    commits: Vec<(Vec<String>, CommitReply)>,
    /// When the oldest unwritten change must be written.
    flush_due: Option<Instant>,
    /// How long the last batch took to read and write: the next one starts that much
    /// earlier, so that a change is in the store about one interval after it as long as a
    /// batch takes less than the interval (a mass enrolment's full-row batches can take more).
    last_flush: Duration,
}

enum Next {
    Continue,
    Stop(Option<oneshot::Sender<()>>),
}

impl<K: From<String> + Send + 'static> WriterLoop<K> {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        loop {
            let received = match self.flush_due {
                Some(due) => rx.recv_timeout(due.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let mut next = match received {
                Ok(command) => self.take(command),
                Err(RecvTimeoutError::Timeout) => Next::Continue,
                Err(RecvTimeoutError::Disconnected) => Next::Stop(None),
            };
            // Whatever else is already queued joins this batch.
            while matches!(next, Next::Continue) {
                match rx.try_recv() {
                    Ok(command) => next = self.take(command),
                    Err(_) => break,
                }
            }
            match next {
                Next::Continue => {
                    let due = self.flush_due.is_some_and(|t| Instant::now() >= t);
                    if due || !self.commits.is_empty() {
                        self.flush();
                    }
                }
                Next::Stop(reply) => {
                    self.flush();
                    if let Some(reply) = reply {
                        let _ = reply.send(());
                    }
                    return;
                }
            }
        }
    }

    fn take(&mut self, command: Command) -> Next {
        match command {
            Command::Dirty => {
                if self.flush_due.is_none() {
                    self.flush_due = Some(flush_due(
                        Instant::now(),
                        self.flush_interval,
                        self.last_flush,
                    ));
                }
            }
            Command::Commit { node_ids, reply } => self.commits.push((node_ids, reply)),
            Command::Check(reply) => {
                let _ = reply.send(self.store.check());
            }
            Command::Shutdown(reply) => return Next::Stop(Some(reply)),
        }
        Next::Continue
    }

    fn flush(&mut self) {
        let flush_started = Instant::now();
        let commits = std::mem::take(&mut self.commits);
        let dirty = std::mem::replace(&mut *self.dirty.lock(), std::mem::take(&mut self.spare));
        self.flush_due = None;
        // A node is in the dirty list once (its write-behind mark keeps it from being queued
        // twice); one also named by a commit is written twice in the batch, harmlessly.
        let mut writes = std::mem::take(&mut self.writes);
        for node in &dirty {
            writes.extend(self.snapshot.snapshot(node));
        }
        let by_id = std::mem::take(&mut self.retry);
        for id in by_id
            .into_iter()
            .chain(commits.iter().flat_map(|(ids, _)| ids.iter().cloned()))
        {
            writes.extend(self.snapshot.snapshot(&K::from(id)));
        }
        self.spare = dirty;
        self.spare.clear();
        if writes.is_empty() {
            self.writes = writes;
            for (_, reply) in commits {
                let _ = reply.send(Ok(()));
            }
            return;
        }
        let durability = if commits.is_empty() {
            Durability::Behind
        } else {
            Durability::Commit
        };
        let started = Instant::now();
        let result = self.store.write(&writes, durability);
        (self.on_flush)(started.elapsed(), writes.len());
        self.last_flush = flush_started.elapsed();
        if result.is_ok() {
            self.snapshot.written(&writes);
        }
        if let Err(error) = &result {
            tracing::error!(%error, rows = writes.len(), "store write failed; retrying");
            // The snapshot cleared the nodes' marks: keep them so the next flush retries.
            self.retry
                .extend(writes.iter().map(|w| w.node_id().to_string()));
            self.flush_due = Some(Instant::now() + self.flush_interval);
        }
        for (_, reply) in commits {
            let _ = reply.send(result.clone());
        }
        writes.clear();
        self.writes = writes;
    }
}

/// When a batch whose first change came at `now` must start, for it to be written within
/// `interval` if it takes as long as the last one did.
fn flush_due(now: Instant, interval: Duration, last_flush: Duration) -> Instant {
    now + interval.saturating_sub(last_flush)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::StoredNode;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    fn row(id: &str, version: u32) -> NodeWrite {
        NodeWrite::Upsert(StoredNode::for_test(id, &format!("{{\"v\":{version}}}")))
    }

    #[test]
    fn a_slow_last_batch_starts_the_next_one_earlier() {
        let now = Instant::now();
        let interval = Duration::from_millis(500);
        assert_eq!(flush_due(now, interval, Duration::ZERO), now + interval);
        assert_eq!(
            flush_due(now, interval, Duration::from_millis(300)),
            now + Duration::from_millis(200)
        );
        assert_eq!(flush_due(now, interval, Duration::from_secs(2)), now);
    }

    #[tokio::test]
    async fn dirty_nodes_are_written_within_the_interval_and_commits_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sqlite3");
        let state: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let view = state.clone();
        struct View(Arc<Mutex<HashMap<String, u32>>>);
        impl Source for View {
            type Key = String;
            fn snapshot(&self, id: &String) -> Option<NodeWrite> {
                Some(match self.0.lock().unwrap().get(id) {
                    Some(v) => row(id, *v),
                    None => NodeWrite::Delete(id.into()),
                })
            }
            fn written(&self, _: &[NodeWrite]) {}
        }
        let snapshot: Snapshot<String> = Box::new(View(view));
        let flushes = Arc::new(Mutex::new(0usize));
        let counted = flushes.clone();
        let writer = Writer::start(
            Box::new(SqliteStore::open(&path).unwrap()),
            snapshot,
            Box::new(move |_, _| *counted.lock().unwrap() += 1),
            Duration::from_millis(100),
        );
        state.lock().unwrap().insert("a".into(), 1);
        writer.handle.mark_dirty("a".into());
        // Not yet written: the interval has not passed.
        let mut reader = SqliteStore::open(&path).unwrap();
        assert!(reader.load_nodes().unwrap().is_empty());
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(reader.load_nodes().unwrap().len(), 1);

        // A commit is written before it returns, with the newest state.
        state.lock().unwrap().insert("a".into(), 2);
        state.lock().unwrap().insert("b".into(), 7);
        writer
            .handle
            .commit(vec!["b".into(), "a".into()])
            .await
            .unwrap();
        let rows = reader.load_nodes().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].record, b"{\"v\":2}");

        // A forgotten node is deleted.
        state.lock().unwrap().remove("a");
        writer.handle.commit(vec!["a".into()]).await.unwrap();
        assert_eq!(reader.load_nodes().unwrap().len(), 1);
        writer.handle.check().await.unwrap();

        // Shutdown writes what is pending.
        state.lock().unwrap().insert("c".into(), 1);
        writer.handle.mark_dirty("c".into());
        writer.shutdown().await;
        assert_eq!(reader.load_nodes().unwrap().len(), 2);
        assert!(*flushes.lock().unwrap() >= 3);
    }
}
