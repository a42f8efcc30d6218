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
//!
//! The list is bounded by time, not length: the writer measures what a full row and a bare
//! contact time cost it to write, and once the queued changes would take more than half the
//! flush interval to write, [`WriterHandle::mark_dirty`] says the queue is full and the caller
//! waits for [`WriterHandle::flushed`] before answering. That keeps every batch short enough
//! for a change to be stored within about one and a half flush intervals (the wait for its
//! batch, then the batch) however fast changes come: the producers slow down to the store's
//! pace instead of the lag growing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::backend::{Durability, Store};
use super::error::StoreError;
use super::node_rows::NodeWrite;

/// Where the writer reads what to write, and reports what it wrote.
pub trait Source: Send + 'static {
    /// How a node is queued for write-behind; commits name nodes by id (`From<String>`).
    type Key: From<String> + Send + 'static;
    /// A node's current state: `Upsert` (or `Seen`) while the controller knows the node,
    /// `Delete` once it has forgotten it; `None` when there is nothing to write (the
    /// controller itself is gone). Also clears the node's "queued for write-behind" mark. It
    /// may take what it needs out of `node`, which is dropped afterwards.
    fn snapshot(&self, node: &mut Self::Key) -> Option<NodeWrite>;
    /// Asks the CPU to start loading what [`Source::snapshot`] of `node` will read, a few
    /// nodes ahead of it: at 100,000 nodes a queued node is rarely in cache, and waiting for
    /// each in turn had been a fifth of the writer's time.
    fn prefetch(&self, _node: &Self::Key) {}
    /// These writes are now in the store.
    fn written(&self, writes: &[NodeWrite]);
}

pub type Snapshot<K> = Box<dyn Source<Key = K>>;

/// How many queued nodes ahead of the one being read the writer asks to be loaded: enough
/// for a memory access (about 100 ns) to overlap the reading of the nodes between.
const PREFETCH_AHEAD: usize = 8;

/// One store write, as the writer reports it.
#[derive(Debug, Clone, Copy)]
pub struct Flushed {
    /// How long the store took.
    pub took: Duration,
    /// How many rows (full rows, deletes and contact times) it wrote.
    pub rows: usize,
    /// For the write that completes a write-behind batch: how long ago the batch's oldest
    /// change was queued, which is what the one-second bound is about.
    pub oldest_change: Option<Duration>,
}

/// Told about every store write.
pub type FlushObserver = Box<dyn Fn(Flushed) + Send>;

/// Where a commit's outcome is sent.
type CommitReply = oneshot::Sender<Result<(), StoreError>>;

enum Command {
    /// The shared dirty list was empty and is not any more: start the flush timer.
    Dirty,
    Commit {
        node_ids: Vec<String>,
        reply: CommitReply,
    },
    /// Write what is queued now, and say when it is written.
    Flush(CommitReply),
    Check(CommitReply),
    Shutdown(oneshot::Sender<()>),
}

/// What a queued change will need written: decides how much of the write-behind budget it
/// takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The node's whole row (its record, VM list or flags changed).
    Row,
    /// Only its last contact time.
    Contact,
}

/// Whether the write-behind queue has room left after a [`WriterHandle::mark_dirty`].
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// Written within the flush interval: nothing to wait for.
    InTime,
    /// The queue holds more than the writer can write in half an interval: wait for
    /// [`WriterHandle::flushed`] before answering, so changes come no faster than they are
    /// stored.
    Full,
}

/// The shared write-behind queue.
struct Dirty<K> {
    nodes: Vec<K>,
    /// How many of `nodes` were queued as [`Change::Row`].
    rows: usize,
    /// When the first of `nodes` was queued.
    since: Option<Instant>,
}

impl<K> Default for Dirty<K> {
    fn default() -> Self {
        Dirty {
            nodes: Vec::new(),
            rows: 0,
            since: None,
        }
    }
}

/// What the writer measured a write to cost, in nanoseconds of its own time per change, and
/// how much queued work makes the queue full.
struct Costs {
    row: AtomicU64,
    contact: AtomicU64,
    budget: u64,
}

impl Costs {
    /// Until the writer has measured a sizeable batch: generous guesses (a full row takes
    /// 10–15 µs on a 2-core machine, a contact time 1–2 µs).
    const FIRST_ROW: u64 = 25_000;
    const FIRST_CONTACT: u64 = 3_000;
    /// Batches smaller than this say more about a transaction's fixed cost than a row's.
    const SAMPLE: usize = 256;

    fn new(flush_interval: Duration) -> Costs {
        Costs {
            row: AtomicU64::new(Self::FIRST_ROW),
            contact: AtomicU64::new(Self::FIRST_CONTACT),
            budget: (flush_interval / 2).as_nanos() as u64,
        }
    }

    /// Whether `rows` full rows and `contacts` contact times take more than the budget.
    fn over_budget(&self, rows: usize, contacts: usize) -> bool {
        let row = self.row.load(Ordering::Relaxed);
        let contact = self.contact.load(Ordering::Relaxed);
        (rows as u64)
            .saturating_mul(row)
            .saturating_add((contacts as u64).saturating_mul(contact))
            > self.budget
    }

    /// Folds a measured batch of `count` changes that took `took` into the estimate (half
    /// old, half new: one slow batch moves it, a lasting change takes it over).
    fn observe(estimate: &AtomicU64, took: Duration, count: usize) {
        if count < Self::SAMPLE {
            return;
        }
        let measured = (took.as_nanos() / count as u128).min(u64::MAX as u128) as u64;
        let old = estimate.load(Ordering::Relaxed);
        estimate.store(old / 2 + measured / 2, Ordering::Relaxed);
    }
}

/// The handle the controller talks to the writer through. Cheap to clone.
pub struct WriterHandle<K> {
    tx: mpsc::Sender<Command>,
    /// Nodes queued for the next write-behind batch.
    dirty: Arc<Mutex<Dirty<K>>>,
    costs: Arc<Costs>,
    /// Why the latest store write failed, until one succeeds (a full disk, say).
    failing: Arc<Mutex<Option<StoreError>>>,
}

impl<K> Clone for WriterHandle<K> {
    fn clone(&self) -> Self {
        WriterHandle {
            tx: self.tx.clone(),
            dirty: self.dirty.clone(),
            costs: self.costs.clone(),
            failing: self.failing.clone(),
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
        let dirty: Arc<Mutex<Dirty<K>>> = Arc::default();
        let shared = dirty.clone();
        let costs = Arc::new(Costs::new(flush_interval));
        let measured = costs.clone();
        let failing: Arc<Mutex<Option<StoreError>>> = Arc::default();
        let told = failing.clone();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                WriterLoop {
                    store,
                    snapshot,
                    on_flush,
                    flush_interval,
                    dirty: shared,
                    costs: measured,
                    failing: told,
                    spare: Vec::new(),
                    retry: Vec::new(),
                    writes: Vec::new(),
                    contacts: Vec::new(),
                    commits: Vec::new(),
                    waiters: Vec::new(),
                    flush_due: None,
                    last_flush: Duration::ZERO,
                }
                .run(rx)
            })
            .expect("spawning the store writer thread");
        Writer {
            handle: WriterHandle {
                tx,
                dirty,
                costs,
                failing,
            },
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
    /// [`Queued::Full`] asks the caller to wait for [`WriterHandle::flushed`].
    pub fn mark_dirty(&self, node: K, change: Change) -> Queued {
        let (first, full) = {
            let mut dirty = self.dirty.lock();
            dirty.nodes.push(node);
            if change == Change::Row {
                dirty.rows += 1;
            }
            let first = dirty.nodes.len() == 1;
            if first {
                dirty.since = Some(Instant::now());
            }
            let contacts = dirty.nodes.len() - dirty.rows;
            (first, self.costs.over_budget(dirty.rows, contacts))
        };
        if first {
            // A closed channel means the process is shutting down; the final flush already ran.
            let _ = self.tx.send(Command::Dirty);
        }
        if full {
            Queued::Full
        } else {
            Queued::InTime
        }
    }

    /// Replaces the writer's cost estimates (until it measures a sizeable batch), so that a
    /// test can fill the queue with a few changes.
    #[cfg(test)]
    pub fn assume_costs(&self, row: Duration, contact: Duration) {
        self.costs
            .row
            .store(row.as_nanos() as u64, Ordering::Relaxed);
        self.costs
            .contact
            .store(contact.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Writes everything queued so far (as a write-behind batch, without waiting for the
    /// interval) and returns once it is in the store.
    pub async fn flushed(&self) -> Result<(), StoreError> {
        self.ask(Command::Flush, "writing").await
    }

    /// Writes the current state of `node_ids` (and everything else pending) and waits until
    /// the transaction has committed.
    pub async fn commit(&self, node_ids: Vec<String>) -> Result<(), StoreError> {
        self.ask(|reply| Command::Commit { node_ids, reply }, "committing")
            .await
    }

    /// Asks the store whether it answers, through the writer (so a wedged writer shows too),
    /// and whether its latest write went through.
    pub async fn check(&self) -> Result<(), StoreError> {
        self.ask(Command::Check, "answering").await
    }

    /// Why the latest store write failed, while no later one has succeeded: a request about
    /// to do what cannot be undone (start a VM) before it commits is refused instead.
    pub fn failing(&self) -> Option<StoreError> {
        self.failing.lock().clone()
    }

    /// Sends the writer a command carrying a reply channel and waits for the reply; `doing`
    /// names the wait in the error if the writer goes away first.
    async fn ask(
        &self,
        command: impl FnOnce(CommitReply) -> Command,
        doing: &'static str,
    ) -> Result<(), StoreError> {
        let (reply, done) = oneshot::channel();
        self.tx
            .send(command(reply))
            .map_err(|_| StoreError::WriterStopped)?;
        done.await
            .map_err(|_| StoreError::WriterStoppedBefore { doing })?
    }
}

struct WriterLoop<K> {
    store: Box<dyn Store>,
    snapshot: Snapshot<K>,
    on_flush: FlushObserver,
    flush_interval: Duration,
    dirty: Arc<Mutex<Dirty<K>>>,
    costs: Arc<Costs>,
    /// Shared with the handles: the latest write's failure, cleared by a write that succeeds.
    failing: Arc<Mutex<Option<StoreError>>>,
    /// The dirty list of the previous flush, emptied, swapped in for the next one: the lists
    /// and the batch keep their capacity from flush to flush.
    spare: Vec<K>,
    /// Nodes of a failed batch, written again with the next one.
    retry: Vec<String>,
    /// The batch's full rows and deletes, then (for a commit) its contact times too.
    writes: Vec<NodeWrite>,
    /// The batch's contact times.
    contacts: Vec<NodeWrite>,
    commits: Vec<(Vec<String>, CommitReply)>,
    /// Callers of [`WriterHandle::flushed`] waiting for this batch.
    waiters: Vec<CommitReply>,
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
                    if due || !self.commits.is_empty() || !self.waiters.is_empty() {
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
            Command::Flush(reply) => self.waiters.push(reply),
            Command::Check(reply) => {
                let failing = self.failing.lock().clone();
                let _ = reply.send(self.store.check().and(failing.map_or(Ok(()), Err)));
            }
            Command::Shutdown(reply) => return Next::Stop(Some(reply)),
        }
        Next::Continue
    }

    fn flush(&mut self) {
        let flush_started = Instant::now();
        let commits = std::mem::take(&mut self.commits);
        let waiters = std::mem::take(&mut self.waiters);
        let (dirty, since) = {
            let mut queue = self.dirty.lock();
            queue.rows = 0;
            let nodes = std::mem::replace(&mut queue.nodes, std::mem::take(&mut self.spare));
            (nodes, queue.since.take())
        };
        self.flush_due = None;
        // A node is in the dirty list once (its write-behind mark keeps it from being queued
        // twice); one also named by a commit is written twice in the batch, harmlessly.
        let mut writes = std::mem::take(&mut self.writes);
        let mut contacts = std::mem::take(&mut self.contacts);
        let by_id = std::mem::take(&mut self.retry);
        let mut dirty = dirty;
        let mut keep = |write: Option<NodeWrite>| match write {
            Some(write @ NodeWrite::Seen { .. }) => contacts.push(write),
            Some(write) => writes.push(write),
            None => {}
        };
        for i in 0..dirty.len() {
            if let Some(ahead) = dirty.get(i + PREFETCH_AHEAD) {
                self.snapshot.prefetch(ahead);
            }
            keep(self.snapshot.snapshot(&mut dirty[i]));
        }
        let by_id = by_id
            .into_iter()
            .chain(commits.iter().flat_map(|(ids, _)| ids.iter().cloned()));
        for id in by_id {
            keep(self.snapshot.snapshot(&mut K::from(id)));
        }
        self.spare = dirty;
        self.spare.clear();
        let snapshotted = flush_started.elapsed();
        let rows = writes.len() + contacts.len();
        let result = if rows == 0 {
            Ok(())
        } else if commits.is_empty() {
            // Written behind: full rows and contact times in a transaction each, timed apart
            // so that the queue's budget knows what each kind costs. A crash between the two
            // leaves contact times older than the rows, which loading tolerates (the newer of
            // a record's time and its contact time wins).
            let share = |kind: usize| snapshotted * kind as u32 / rows as u32;
            let costs = self.costs.clone();
            let rows_since = if contacts.is_empty() { since } else { None };
            let rows_share = share(writes.len());
            self.write_timed(
                &writes,
                Durability::Behind,
                &costs.row,
                rows_share,
                rows_since,
            )
            .and_then(|()| {
                let contacts_share = share(contacts.len());
                self.write_timed(
                    &contacts,
                    Durability::Behind,
                    &costs.contact,
                    contacts_share,
                    since,
                )
            })
        } else {
            // A commit is one transaction, whatever it holds.
            writes.append(&mut contacts);
            let unmeasured = AtomicU64::new(0);
            self.write_timed(
                &writes,
                Durability::Commit,
                &unmeasured,
                Duration::ZERO,
                since,
            )
        };
        self.last_flush = flush_started.elapsed();
        if rows > 0 {
            *self.failing.lock() = result.as_ref().err().cloned();
        }
        if let Err(error) = &result {
            tracing::error!(%error, rows, "store write failed; retrying");
            // The snapshot cleared the nodes' marks: keep them so the next flush retries.
            // Once each: a node queued again while its retry is pending is in the batch twice,
            // and a store that fails for minutes (a full disk) would otherwise add a copy of
            // every heartbeating node to the list with each attempt.
            self.retry.extend(
                writes
                    .iter()
                    .chain(&contacts)
                    .map(|w| w.node_id().to_string()),
            );
            self.retry.sort_unstable();
            self.retry.dedup();
            self.flush_due = Some(Instant::now() + self.flush_interval);
        }
        for reply in commits.into_iter().map(|(_, reply)| reply).chain(waiters) {
            let _ = reply.send(result.clone());
        }
        writes.clear();
        contacts.clear();
        self.writes = writes;
        self.contacts = contacts;
    }

    /// Writes `batch` (if it holds anything), reports it (with the age of a write-behind
    /// change queued `since`), and folds what it took per row (plus `snapshotted`, its share
    /// of reading the nodes) into `estimate`.
    fn write_timed(
        &mut self,
        batch: &[NodeWrite],
        durability: Durability,
        estimate: &AtomicU64,
        snapshotted: Duration,
        since: Option<Instant>,
    ) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.store.write(batch, durability);
        let took = started.elapsed();
        (self.on_flush)(Flushed {
            took,
            rows: batch.len(),
            oldest_change: since.filter(|_| result.is_ok()).map(|t| t.elapsed()),
        });
        if result.is_ok() {
            self.snapshot.written(batch);
            Costs::observe(estimate, took + snapshotted, batch.len());
        }
        result
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
    use crate::store::node_rows::StoredNode;
    use crate::store::sqlite::SqliteStore;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    fn row(id: &str, version: u32) -> NodeWrite {
        NodeWrite::Upsert(Box::new(StoredNode::for_test(
            id,
            &format!("{{\"v\":{version}}}"),
        )))
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

    #[test]
    fn the_budget_weighs_full_rows_and_contact_times_apart() {
        let costs = Costs::new(Duration::from_millis(500));
        costs.row.store(10_000, Ordering::Relaxed);
        costs.contact.store(1_000, Ordering::Relaxed);
        // 250 ms of budget: 25,000 rows, or 250,000 contact times, or a mix.
        assert!(!costs.over_budget(25_000, 0));
        assert!(costs.over_budget(25_001, 0));
        assert!(!costs.over_budget(0, 250_000));
        assert!(costs.over_budget(20_000, 50_001));
        // A measured batch moves the estimate halfway; a small one says nothing.
        Costs::observe(&costs.row, Duration::from_millis(30), 1_000);
        assert_eq!(costs.row.load(Ordering::Relaxed), 20_000);
        Costs::observe(&costs.row, Duration::from_secs(1), Costs::SAMPLE - 1);
        assert_eq!(costs.row.load(Ordering::Relaxed), 20_000);
    }

    /// Serves rows from a map: keys starting with `c` are contact times only.
    struct Rows(Arc<Mutex<HashMap<String, u32>>>);
    impl Source for Rows {
        type Key = String;
        fn snapshot(&self, id: &mut String) -> Option<NodeWrite> {
            Some(match self.0.lock().unwrap().get(id) {
                Some(_) if id.starts_with('c') => NodeWrite::Seen {
                    node_id: id.as_str().into(),
                    last_heartbeat: "2026-11-30T10:00:00Z".parse().unwrap(),
                },
                Some(v) => row(id, *v),
                None => NodeWrite::Delete(id.clone()),
            })
        }
        fn written(&self, _: &[NodeWrite]) {}
    }

    #[tokio::test]
    async fn a_full_queue_asks_callers_to_wait_and_is_written_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sqlite3");
        let state: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        // An interval no test waits out: only `flushed` writes here.
        let interval = Duration::from_secs(600);
        let writer = Writer::start(
            Box::new(SqliteStore::open(&path).unwrap()),
            Box::new(Rows(state.clone())),
            Box::new(|_| {}),
            interval,
        );
        let handle = &writer.handle;
        // Pretend a row takes a minute to write: five fill the 300 s budget.
        handle.assume_costs(Duration::from_secs(60), Duration::from_nanos(1));
        for i in 0..5 {
            let id = format!("n{i}");
            state.lock().unwrap().insert(id.clone(), 1);
            assert_eq!(
                handle.mark_dirty(id, Change::Row),
                Queued::InTime,
                "row {i}"
            );
        }
        state.lock().unwrap().insert("n5".into(), 1);
        assert_eq!(handle.mark_dirty("n5".into(), Change::Row), Queued::Full);
        // Waiting for the flush writes every queued row now, not after the interval.
        tokio::time::timeout(Duration::from_secs(30), handle.flushed())
            .await
            .expect("flushed without waiting for the interval")
            .unwrap();
        let mut reader = SqliteStore::open(&path).unwrap();
        assert_eq!(reader.load_nodes().unwrap().len(), 6);
        // The queue is empty again.
        state.lock().unwrap().insert("n6".into(), 1);
        assert_eq!(handle.mark_dirty("n6".into(), Change::Row), Queued::InTime);

        // A sizeable batch of each kind replaces the guesses with measurements.
        for i in 0..Costs::SAMPLE {
            for id in [format!("r{i}"), format!("c{i}")] {
                state.lock().unwrap().insert(id.clone(), 1);
                let _ = handle.mark_dirty(id, Change::Contact);
            }
        }
        handle.flushed().await.unwrap();
        assert_ne!(handle.costs.row.load(Ordering::Relaxed), 60_000_000_000);
        assert_ne!(handle.costs.contact.load(Ordering::Relaxed), 1);
        writer.shutdown().await;
    }

    #[tokio::test]
    async fn each_queued_node_is_prefetched_a_few_nodes_before_it_is_read() {
        /// Records the order of the writer's calls.
        struct Calls(Arc<Mutex<Vec<String>>>);
        impl Source for Calls {
            type Key = String;
            fn snapshot(&self, id: &mut String) -> Option<NodeWrite> {
                self.0.lock().unwrap().push(format!("read {id}"));
                Some(row(id, 1))
            }
            fn prefetch(&self, id: &String) {
                self.0.lock().unwrap().push(format!("prefetch {id}"));
            }
            fn written(&self, _: &[NodeWrite]) {}
        }
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let writer = Writer::start(
            Box::new(SqliteStore::in_memory().unwrap()),
            Box::new(Calls(calls.clone())),
            Box::new(|_| {}),
            Duration::from_millis(50),
        );
        let ids: Vec<String> = (0..PREFETCH_AHEAD + 3)
            .map(|i| format!("n{i:02}"))
            .collect();
        for id in &ids {
            let _ = writer.handle.mark_dirty(id.clone(), Change::Row);
        }
        writer.handle.flushed().await.unwrap();
        let calls = calls.lock().unwrap().clone();
        let at = |call: String| calls.iter().position(|c| *c == call);
        for (i, id) in ids.iter().enumerate() {
            let prefetched = at(format!("prefetch {id}"));
            match i.checked_sub(PREFETCH_AHEAD) {
                Some(before) => assert_eq!(
                    prefetched.map(|p| p + 1),
                    at(format!("read {}", ids[before])),
                    "{id} is prefetched just before {} is read",
                    ids[before]
                ),
                None => assert_eq!(prefetched, None, "{id}"),
            }
            assert!(at(format!("read {id}")) > prefetched, "{id}");
        }
        writer.shutdown().await;
    }

    /// A store whose writes fail with a full disk while `full` is set.
    struct FillingStore {
        inner: SqliteStore,
        full: Arc<std::sync::atomic::AtomicBool>,
    }
    impl Store for FillingStore {
        fn load_nodes(&mut self) -> Result<Vec<StoredNode>, StoreError> {
            self.inner.load_nodes()
        }
        fn write(&mut self, batch: &[NodeWrite], d: Durability) -> Result<(), StoreError> {
            if self.full.load(Ordering::SeqCst) {
                return Err(StoreError::DiskFull {
                    doing: "commit",
                    cause: "database or disk is full".into(),
                });
            }
            self.inner.write(batch, d)
        }
        fn check(&mut self) -> Result<(), StoreError> {
            self.inner.check()
        }
        fn schema_version(&mut self) -> Result<u32, StoreError> {
            self.inner.schema_version()
        }
    }

    #[tokio::test]
    async fn a_failing_store_is_reported_retried_once_per_node_and_recovers_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sqlite3");
        let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let state: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let attempts: Arc<Mutex<Vec<usize>>> = Arc::default();
        let seen = attempts.clone();
        let writer = Writer::start(
            Box::new(FillingStore {
                inner: SqliteStore::open(&path).unwrap(),
                full: full.clone(),
            }),
            Box::new(Rows(state.clone())),
            Box::new(move |f| seen.lock().unwrap().push(f.rows)),
            Duration::from_millis(20),
        );
        let handle = &writer.handle;
        state.lock().unwrap().insert("a".into(), 1);
        handle.commit(vec!["a".into()]).await.unwrap();
        full.store(true, Ordering::SeqCst);
        state.lock().unwrap().insert("b".into(), 1);
        let refused = handle.commit(vec!["b".into()]).await.unwrap_err();
        assert!(matches!(refused, StoreError::DiskFull { .. }));
        assert_eq!(handle.failing(), Some(refused.clone()));
        assert_eq!(handle.check().await, Err(refused));
        // Nodes queued again and again while the store fails: an attempt writes each node at
        // most twice (queued, and kept from the failed attempt), however many attempts failed.
        attempts.lock().unwrap().clear();
        for round in 0..10 {
            for id in ["a", "d"] {
                state.lock().unwrap().insert(id.into(), round);
                let _ = handle.mark_dirty(id.into(), Change::Row);
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let sizes = attempts.lock().unwrap().clone();
        assert!(sizes.len() >= 5, "{sizes:?}");
        assert!(sizes.iter().all(|&rows| rows <= 5), "{sizes:?}");
        // Space returns: the pending retry goes through without being asked, and clears it.
        full.store(false, Ordering::SeqCst);
        for _ in 0..100 {
            if handle.failing().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(handle.failing(), None);
        handle.check().await.unwrap();
        let ids: Vec<String> = SqliteStore::open(&path)
            .unwrap()
            .load_nodes()
            .unwrap()
            .into_iter()
            .map(|n| n.node_id)
            .collect();
        assert_eq!(ids, ["a", "b", "d"]);
        writer.shutdown().await;
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
            fn snapshot(&self, id: &mut String) -> Option<NodeWrite> {
                Some(match self.0.lock().unwrap().get(id) {
                    Some(v) => row(id, *v),
                    None => NodeWrite::Delete(id.clone()),
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
            Box::new(move |_| *counted.lock().unwrap() += 1),
            Duration::from_millis(100),
        );
        state.lock().unwrap().insert("a".into(), 1);
        let _ = writer.handle.mark_dirty("a".into(), Change::Row);
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
        let _ = writer.handle.mark_dirty("c".into(), Change::Row);
        writer.shutdown().await;
        assert_eq!(reader.load_nodes().unwrap().len(), 2);
        assert!(*flushes.lock().unwrap() >= 3);
    }
}
