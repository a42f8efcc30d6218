//! The liveness board: each node's status and last contact packed into one word, in arrays
//! the staleness sweep can read without touching the nodes.
//!
//! The sweep runs every second and must find the nodes that have just gone silent (and those
//! silent long enough to forget). Locking and reading every node for that cost 0.5–0.9 % of the
//! controller's CPU at 100,000 nodes, most of it waiting for nodes that are not in cache. A
//! word per node in a few contiguous arrays is read in well under a millisecond, and only
//! the nodes it shows to be due are locked and looked at.
//!
//! The board is a hint kept by the node rules (`nodes::refresh_status` posts a node's
//! word whenever it re-derives its status, under the node's lock); the decisions are still
//! made on the node itself. A word is never later than the node: a node is found due no later
//! than it really is, at worst a millisecond early (then it is looked at, found alive, and
//! left for a later sweep).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_types::{HostState, NodeCounts, Timestamp};

use crate::controller::table::node_counts::{count, zero_counts};

/// Words per array: arrays are added as the fleet grows and never move, so a node keeps a
/// handle to its word.
const CHUNK: usize = 4096;
/// A word no node holds.
const VACANT: u64 = u64::MAX;
/// Contact times are milliseconds from the board's epoch, offset so that the times of nodes
/// silent since before the controller started (loaded from the store) stay positive.
const BIAS_MS: i64 = 1 << 58;

/// One array of words, with the instant its times count from.
struct Chunk {
    epoch: Instant,
    words: Box<[AtomicU64]>,
}

/// A node's word on the board (not `Clone`: a word has one holder, who gives it back once).
pub struct Cell {
    chunk: Arc<Chunk>,
    /// Board-wide: the word is `chunk.words[index % CHUNK]`.
    index: usize,
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cell({})", self.index)
    }
}

impl Cell {
    /// Records the node's status and its last contact: `last_seen` by the controller's clock,
    /// or, for a node not heard from since it was loaded, its stored `last_heartbeat`.
    pub fn post(&self, status: HostState, last_seen: Option<Instant>, last_heartbeat: Timestamp) {
        let epoch = self.chunk.epoch;
        let seen_ms = match last_seen {
            Some(seen) => match seen.checked_duration_since(epoch) {
                Some(after) => millis(after),
                // Rounded down, as times after the epoch are: a word is never later than the node.
                None => -millis(epoch - seen) - 1,
            },
            None => {
                let silent = (Timestamp::now().utc() - last_heartbeat.utc())
                    .num_milliseconds()
                    .max(0);
                millis(epoch.elapsed()) - silent - 1
            }
        };
        self.chunk.words[self.index % CHUNK].store(word(status, seen_ms), Ordering::Relaxed);
    }

    /// Where the word sits on the board, as [`Board::due`] names it.
    pub fn index(&self) -> usize {
        self.index
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn word(status: HostState, seen_ms: i64) -> u64 {
    let code = match status {
        HostState::Registering => 0,
        HostState::Ready => 1,
        HostState::Draining => 2,
        HostState::Unreachable => 3,
    };
    let seen = seen_ms.clamp(-BIAS_MS, BIAS_MS) + BIAS_MS;
    (seen as u64) << 2 | code
}

fn unpack(word: u64) -> (HostState, i64) {
    let status = match word & 3 {
        0 => HostState::Registering,
        1 => HostState::Ready,
        2 => HostState::Draining,
        _ => HostState::Unreachable,
    };
    (status, (word >> 2) as i64 - BIAS_MS)
}

/// The board: its arrays and which of their words are free. Kept by the node table under a
/// lock (words are taken and freed as nodes are added and removed).
pub struct Board {
    epoch: Instant,
    chunks: Vec<Arc<Chunk>>,
    free: Vec<usize>,
    used: usize,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            epoch: Instant::now(),
            chunks: Vec::new(),
            free: Vec::new(),
            used: 0,
        }
    }
}

impl Board {
    /// A word for a new node (vacant until the node posts to it).
    pub fn take(&mut self) -> Cell {
        let index = self.free.pop().unwrap_or_else(|| {
            self.used += 1;
            self.used - 1
        });
        if index / CHUNK == self.chunks.len() {
            self.chunks.push(Arc::new(Chunk {
                epoch: self.epoch,
                words: (0..CHUNK).map(|_| AtomicU64::new(VACANT)).collect(),
            }));
        }
        Cell {
            chunk: self.chunks[index / CHUNK].clone(),
            index,
        }
    }

    /// Gives a removed node's word back.
    pub fn release(&mut self, cell: Cell) {
        cell.chunk.words[cell.index % CHUNK].store(VACANT, Ordering::Relaxed);
        self.free.push(cell.index);
    }

    /// The words of nodes due for a look at `now`: alive but silent for `stale_after` or
    /// more, or unreachable and silent for `forget_after` or more.
    pub fn due(&self, now: Instant, stale_after: Duration, forget_after: Duration) -> Vec<usize> {
        let now_ms = millis(now.saturating_duration_since(self.epoch));
        let (stale_ms, forget_ms) = (millis(stale_after), millis(forget_after));
        self.posted()
            .filter(|&(_, status, seen_ms)| {
                let limit = if status == HostState::Unreachable {
                    forget_ms
                } else {
                    stale_ms
                };
                now_ms.saturating_sub(seen_ms) >= limit
            })
            .map(|(index, _, _)| index)
            .collect()
    }

    /// Nodes by status, as last posted.
    pub fn counts(&self) -> NodeCounts {
        let mut counts = zero_counts();
        for (_, status, _) in self.posted() {
            count(&mut counts, status);
        }
        counts
    }

    /// Every word a node has posted to: its index, status and time.
    fn posted(&self) -> impl Iterator<Item = (usize, HostState, i64)> + '_ {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk.words.iter().enumerate().filter_map(move |(i, w)| {
                let w = w.load(Ordering::Relaxed);
                (w != VACANT).then(|| {
                    let (status, seen_ms) = unpack(w);
                    (c * CHUNK + i, status, seen_ms)
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(30);
    const FORGET: Duration = Duration::from_secs(24 * 3600);

    fn ago(d: Duration) -> Timestamp {
        (Timestamp::now().utc() - chrono::Duration::from_std(d).unwrap()).into()
    }

    #[test]
    fn only_nodes_silent_past_their_limit_are_due_and_counts_follow_the_posts() {
        let mut board = Board::default();
        let now = Instant::now();
        let fresh = board.take();
        fresh.post(HostState::Ready, Some(now), Timestamp::now());
        let silent = board.take();
        silent.post(
            HostState::Ready,
            Some(now - STALE - Duration::from_millis(5)),
            Timestamp::now(),
        );
        let draining = board.take();
        draining.post(
            HostState::Draining,
            Some(now - STALE - Duration::from_secs(1)),
            Timestamp::now(),
        );
        // Loaded from the store, unreachable: due by its stored time against the forget limit.
        let loaded_recent = board.take();
        loaded_recent.post(HostState::Unreachable, None, ago(Duration::from_secs(60)));
        let loaded_old = board.take();
        loaded_old.post(
            HostState::Unreachable,
            None,
            ago(FORGET + Duration::from_secs(60)),
        );
        assert_eq!(board.due(now, STALE, FORGET), [1, 2, 4]);
        let counts = board.counts();
        assert_eq!(
            (
                counts.ready,
                counts.draining,
                counts.unreachable,
                counts.registering
            ),
            (2, 1, 2, 0)
        );

        // The silent node heartbeats again: no longer due.
        silent.post(HostState::Ready, Some(now), Timestamp::now());
        assert_eq!(board.due(now, STALE, FORGET), [2, 4]);
    }

    #[test]
    fn a_released_word_is_vacant_and_taken_again() {
        let mut board = Board::default();
        let now = Instant::now();
        let mut cells: Vec<Cell> = (0..CHUNK + 3).map(|_| board.take()).collect();
        for cell in &cells {
            cell.post(HostState::Unreachable, Some(now - FORGET), Timestamp::now());
        }
        assert_eq!(board.chunks.len(), 2);
        assert_eq!(board.due(now, STALE, FORGET).len(), CHUNK + 3);
        board.release(cells.remove(CHUNK + 1));
        assert_eq!(board.counts().unreachable as usize, CHUNK + 2);
        assert!(!board.due(now, STALE, FORGET).contains(&(CHUNK + 1)));
        // Reused before the board grows.
        let again = board.take();
        again.post(HostState::Registering, Some(now), Timestamp::now());
        assert_eq!(again.index(), CHUNK + 1);
        assert_eq!(board.counts().registering, 1);
    }

    #[test]
    fn a_word_keeps_status_and_time_including_times_before_the_epoch() {
        for status in HostState::ALL {
            for ms in [-(1 << 40), -1, 0, 1, 1 << 40] {
                assert_eq!(unpack(word(status, ms)), (status, ms));
            }
        }
    }
}
