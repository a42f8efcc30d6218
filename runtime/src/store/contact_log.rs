//! The row format of the contact log: the last contact times of one write-behind batch,
//! packed into one blob so that a batch costs one appended row instead of one b-tree update
//! per node. A fold ([`merge`]) turns the log's rows into one blob of the same format with
//! each node once, at its latest time.
//!
//! A blob is a format byte followed by one entry per node, in node-id order. The id is
//! front-coded against the previous entry's (sorted ids share long prefixes): the count of
//! leading bytes it shares with the previous id (u8), the count of bytes that follow (u16,
//! little endian) and those bytes. In format 2, the one written, the time follows as three
//! varints (LEB128, signed ones zigzag-coded): its seconds since the Unix epoch as the
//! difference from the previous entry's (the first from zero), its nanoseconds, and its UTC
//! offset in seconds; the contact times of a batch lie within about a second of each other,
//! so an entry's time takes about seven bytes, and the writer neither formats nor copies
//! text. Format 1, written by earlier builds and still read, has the time as RFC 3339 text
//! front-coded the same way as the id with a u8 count for both. A blob that does not decode
//! is reported with the byte offset where it went wrong.

use chrono::{DateTime, FixedOffset};
use fleetwire_types::Timestamp;
use integer_encoding::VarInt;

use super::node_rows::NodeWrite;

/// Why a batch's contact times cannot be encoded, or a blob does not decode (with the byte
/// offset where it went wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContactLogError {
    /// An id longer than the entry's u16 length field: refused, not truncated.
    #[error("node id {id:?} is too long for the contact log")]
    IdTooLong { id: String },
    #[error("unknown contact log format {format}")]
    UnknownFormat { format: u8 },
    #[error("empty contact log entry")]
    Empty,
    #[error("truncated at byte {at}")]
    Truncated { at: usize },
    #[error("truncated or overlong number at byte {at}")]
    BadNumber { at: usize },
    #[error("byte {at}: {seconds} s, {nanos} ns, offset {offset} s is not a time")]
    NotATime {
        at: usize,
        seconds: i64,
        nanos: u32,
        offset: i32,
    },
    /// A format-1 time whose text does not parse.
    #[error("byte {at}: {cause}")]
    BadTextTime { at: usize, cause: String },
    #[error("byte {at} continues {shared} bytes of a {len}-byte string")]
    BadPrefix {
        at: usize,
        shared: usize,
        len: usize,
    },
    #[error("not UTF-8 at byte {at}: {cause}")]
    NotUtf8 { at: usize, cause: String },
    /// An id before the previous entry's: not a blob of this format, whose entries are in
    /// node-id order (the merge relies on it).
    #[error("byte {at}: a node id out of order")]
    OutOfOrder { at: usize },
}

/// The format written.
const FORMAT: u8 = 2;
/// The format of earlier builds, with RFC 3339 text times: still read.
const FORMAT_TEXT: u8 = 1;

/// Encodes the contact times of a batch; keeps its buffers from batch to batch (a batch at
/// 100,000 nodes is a megabyte of scratch that would otherwise be faulted in afresh).
#[derive(Debug, Default)]
pub struct Encoder {
    /// The batch's `Seen` writes as (sort key, index in the batch), sorted by node id.
    order: Vec<(u64, usize)>,
    blob: Vec<u8>,
}

impl Encoder {
    /// The blob of the `Seen` writes in `batch`, `None` when it has none. A node written
    /// twice keeps both entries, in batch order (the later one wins on decode).
    pub fn encode(&mut self, batch: &[NodeWrite]) -> Result<Option<&[u8]>, ContactLogError> {
        self.encode_where(batch, |_| true)
    }

    /// [`Encoder::encode`] of the `Seen` writes whose index in `batch` `keep` accepts.
    pub fn encode_where(
        &mut self,
        batch: &[NodeWrite],
        keep: impl Fn(usize) -> bool,
    ) -> Result<Option<&[u8]>, ContactLogError> {
        self.order.clear();
        self.order.extend(
            batch
                .iter()
                .enumerate()
                .filter(|&(i, w)| matches!(w, NodeWrite::Seen { .. }) && keep(i))
                .map(|(i, _)| (0, i)),
        );
        let Some(&(_, first)) = self.order.first() else {
            return Ok(None);
        };
        // Ids of a fleet share long prefixes: sort on the eight bytes after the batch's common
        // prefix as an integer, and compare whole ids only when those tie. An integer sort of
        // the batch instead of string comparisons through a pointer per entry.
        let id = |i: usize| batch[i].node_id().as_bytes();
        let common = self.order.iter().fold(id(first).len(), |common, &(_, i)| {
            shared(&id(first)[..common], id(i))
        });
        for (key, i) in &mut self.order {
            *key = sort_key(&id(*i)[common..]);
        }
        // Unstable, but ending on the batch index: duplicates stay in batch order.
        self.order.sort_unstable_by(|&(key_a, a), &(key_b, b)| {
            key_a
                .cmp(&key_b)
                .then_with(|| batch[a].node_id().cmp(batch[b].node_id()))
                .then(a.cmp(&b))
        });
        self.blob.clear();
        self.blob.push(FORMAT);
        let mut last = ("", 0i64);
        for &(_, i) in &self.order {
            let NodeWrite::Seen {
                node_id,
                last_heartbeat,
            } = &batch[i]
            else {
                unreachable!("only Seen writes are ordered");
            };
            last = (
                node_id,
                push_entry(&mut self.blob, last, node_id, *last_heartbeat)?,
            );
        }
        Ok(Some(&self.blob))
    }
}

/// Appends the entry of `id` at `time` to a blob of the written format, coded against the
/// previous entry's id and seconds (`""` and 0 for the first); returns its seconds.
fn push_entry(
    blob: &mut Vec<u8>,
    (last_id, last_seconds): (&str, i64),
    id: &str,
    time: Timestamp,
) -> Result<i64, ContactLogError> {
    let id_shared = shared(last_id.as_bytes(), id.as_bytes()).min(u8::MAX as usize);
    let id_rest = u16::try_from(id.len() - id_shared)
        .map_err(|_| ContactLogError::IdTooLong { id: id.to_string() })?;
    blob.push(id_shared as u8);
    blob.extend_from_slice(&id_rest.to_le_bytes());
    blob.extend_from_slice(&id.as_bytes()[id_shared..]);
    let time = time.as_datetime();
    let seconds = time.timestamp();
    push_varint(blob, seconds.wrapping_sub(last_seconds));
    push_varint(blob, time.timestamp_subsec_nanos());
    push_varint(blob, time.offset().local_minus_utc());
    Ok(seconds)
}

/// Merges `blobs` (batches in write order) into one blob of the written format in `into`:
/// each node once, with its latest time, leaving out the nodes `keep` refuses. Returns how
/// many entries it holds. This is how the log is kept short: its batches become one row
/// that reads back the same.
pub fn merge(
    blobs: &[&[u8]],
    keep: impl Fn(&str) -> bool,
    into: &mut Vec<u8>,
) -> Result<usize, MergeError<ContactLogError>> {
    into.clear();
    into.push(FORMAT);
    let (mut last_id, mut last_seconds, mut entries) = (String::new(), 0i64, 0);
    for_each_latest(blobs, |id, time| {
        if keep(id) {
            last_seconds = push_entry(into, (&last_id, last_seconds), id, time)?;
            last_id.clear();
            last_id.push_str(id);
            entries += 1;
        }
        Ok(())
    })?;
    Ok(entries)
}

fn push_varint(blob: &mut Vec<u8>, value: impl VarInt) {
    let mut bytes = [0u8; 10];
    let n = value.encode_var(&mut bytes);
    blob.extend_from_slice(&bytes[..n]);
}

/// The first eight bytes of `rest` as a big-endian integer, zero-padded: ordering by it agrees
/// with ordering the strings (a shorter string is a zero-padded one), up to ties.
fn sort_key(rest: &[u8]) -> u64 {
    let mut key = [0u8; 8];
    let n = rest.len().min(8);
    key[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(key)
}

/// How many leading bytes `a` and `b` share.
fn shared(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Calls `each` with every `(node id, contact time)` of a blob, in order. On an error some
/// entries may already have been passed on: the caller fails as a whole.
#[cfg(test)]
fn decode(blob: &[u8], mut each: impl FnMut(&str, Timestamp)) -> Result<(), ContactLogError> {
    let mut entries = Decoder::new(blob)?;
    while entries.advance()? {
        each(entries.id(), entries.time());
    }
    Ok(())
}

/// Reads a blob's entries one at a time.
pub struct Decoder<'a> {
    blob: &'a [u8],
    at: usize,
    id: String,
    time: Timestamp,
    /// What the next entry's time is coded against.
    previous: PreviousTime,
}

/// The current entry's time as the blob's format codes the next one against it.
enum PreviousTime {
    /// Format 2: its seconds since the epoch.
    Seconds(i64),
    /// Format 1: its RFC 3339 text.
    Text(String),
}

impl<'a> Decoder<'a> {
    pub fn new(blob: &'a [u8]) -> Result<Decoder<'a>, ContactLogError> {
        let previous = match blob.first() {
            Some(&FORMAT) => PreviousTime::Seconds(0),
            Some(&FORMAT_TEXT) => PreviousTime::Text(String::new()),
            Some(&format) => return Err(ContactLogError::UnknownFormat { format }),
            None => return Err(ContactLogError::Empty),
        };
        Ok(Decoder {
            blob,
            at: 1,
            id: String::new(),
            time: Timestamp::from(DateTime::UNIX_EPOCH),
            previous,
        })
    }

    /// Moves to the next entry; false at the end of the blob.
    pub fn advance(&mut self) -> Result<bool, ContactLogError> {
        let (blob, at) = (self.blob, self.at);
        if at >= blob.len() {
            return Ok(false);
        }
        let [id_shared] = field::<1>(blob, at)?;
        let id_rest = u16::from_le_bytes(field::<2>(blob, at + 1)?) as usize;
        // The new id keeps the previous one's first `id_shared` bytes: it sorts before the
        // previous one exactly when its own bytes sort before the rest of the previous one.
        let previous_rest = self.id.as_bytes().get(id_shared as usize..);
        if let (Some(rest), Some(suffix)) = (previous_rest, blob.get(at + 3..at + 3 + id_rest)) {
            if suffix < rest {
                return Err(ContactLogError::OutOfOrder { at: at + 3 });
            }
        }
        let at = front_decoded(&mut self.id, blob, at + 3, id_shared as usize, id_rest)?;
        let (time, end) = match &mut self.previous {
            PreviousTime::Seconds(seconds) => numeric_time(blob, at, seconds)?,
            PreviousTime::Text(text) => text_time(blob, at, text)?,
        };
        (self.time, self.at) = (time, end);
        Ok(true)
    }

    /// The current entry's node id (after a successful [`Decoder::advance`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current entry's contact time.
    pub fn time(&self) -> Timestamp {
        self.time
    }
}

/// Format 2: the time whose three varints are at `at`, coded against `seconds` (which it
/// replaces); the offset after them.
fn numeric_time(
    blob: &[u8],
    at: usize,
    seconds: &mut i64,
) -> Result<(Timestamp, usize), ContactLogError> {
    let (delta, after_seconds) = varint::<i64>(blob, at)?;
    let (nanos, after_nanos) = varint::<u32>(blob, after_seconds)?;
    let (offset, end) = varint::<i32>(blob, after_nanos)?;
    let these = seconds.wrapping_add(delta);
    let time = DateTime::from_timestamp(these, nanos)
        .zip(FixedOffset::east_opt(offset))
        .map(|(utc, offset)| utc.with_timezone(&offset))
        .ok_or(ContactLogError::NotATime {
            at,
            seconds: these,
            nanos,
            offset,
        })?;
    *seconds = these;
    Ok((time.into(), end))
}

/// Format 1: the time whose front-coded RFC 3339 text is at `at`, coded against `text` (which
/// it replaces); the offset after it.
fn text_time(
    blob: &[u8],
    at: usize,
    text: &mut String,
) -> Result<(Timestamp, usize), ContactLogError> {
    let [time_shared, time_rest] = field::<2>(blob, at)?;
    let end = front_decoded(text, blob, at + 2, time_shared as usize, time_rest as usize)?;
    let time = text.parse().map_err(|e| ContactLogError::BadTextTime {
        at: at + 2,
        cause: format!("{e}"),
    })?;
    Ok((time, end))
}

/// The varint at `at` in the blob, and the offset after it.
fn varint<T: VarInt>(blob: &[u8], at: usize) -> Result<(T, usize), ContactLogError> {
    let (value, len) = blob
        .get(at..)
        .and_then(T::decode_var)
        .ok_or(ContactLogError::BadNumber { at })?;
    Ok((value, at + len))
}

/// Why [`for_each_latest`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum MergeError<E> {
    /// Blob number `blob` (its index in the slice) does not decode.
    Damaged { blob: usize, error: ContactLogError },
    /// The callback failed.
    Stopped(E),
}

/// Calls `each` once per node of `blobs` (batches in write order, each sorted by node id)
/// with its latest contact time, in node-id order: a k-way merge of the batches in which
/// the later batch wins a tie, so each entry costs a few comparisons against the other
/// batches' heads instead of a lookup in a map of every node.
pub fn for_each_latest<E>(
    blobs: &[&[u8]],
    mut each: impl FnMut(&str, Timestamp) -> Result<(), E>,
) -> Result<(), MergeError<E>> {
    let damaged = |blob: usize| move |error: ContactLogError| MergeError::Damaged { blob, error };
    let mut heads = Vec::with_capacity(blobs.len());
    for (index, blob) in blobs.iter().enumerate() {
        let mut head = Decoder::new(blob).map_err(damaged(index))?;
        if head.advance().map_err(damaged(index))? {
            heads.push((index, head));
        }
    }
    // A min-heap on (node id, batch index) over the batches' current entries.
    let before = |a: &(usize, Decoder), b: &(usize, Decoder)| (a.1.id(), a.0) < (b.1.id(), b.0);
    let mut heap = MinHeap::new(heads, before);
    // The entry last taken off the heap: emitted once the heap moves past its node.
    let (mut id, mut time) = (String::new(), None);
    while let Some((index, head)) = heap.top_mut() {
        if let Some(time) = time.filter(|_| head.id() != id) {
            each(&id, time).map_err(MergeError::Stopped)?;
        }
        id.clear();
        id.push_str(head.id());
        time = Some(head.time());
        let index = *index;
        if head.advance().map_err(damaged(index))? {
            heap.sift_top();
        } else {
            heap.pop_top();
        }
    }
    if let Some(time) = time {
        each(&id, time).map_err(MergeError::Stopped)?;
    }
    Ok(())
}

/// A binary min-heap whose order is a closure over its items (std's `BinaryHeap` wants an
/// `Ord` the items cannot have: their key borrows from themselves).
struct MinHeap<T, F> {
    items: Vec<T>,
    before: F,
}

impl<T, F: Fn(&T, &T) -> bool> MinHeap<T, F> {
    fn new(items: Vec<T>, before: F) -> MinHeap<T, F> {
        let mut heap = MinHeap { items, before };
        for i in (0..heap.items.len() / 2).rev() {
            heap.sift_down(i);
        }
        heap
    }

    fn top_mut(&mut self) -> Option<&mut T> {
        self.items.first_mut()
    }

    /// Restores the order after the top item changed.
    fn sift_top(&mut self) {
        self.sift_down(0);
    }

    fn pop_top(&mut self) {
        if !self.items.is_empty() {
            self.items.swap_remove(0);
            self.sift_down(0);
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < self.items.len() && (self.before)(&self.items[left], &self.items[least]) {
                least = left;
            }
            if right < self.items.len() && (self.before)(&self.items[right], &self.items[least]) {
                least = right;
            }
            if least == i {
                return;
            }
            self.items.swap(i, least);
            i = least;
        }
    }
}

/// Rebuilds `text` as its first `shared` bytes followed by the `rest` bytes at `at` in the
/// blob; the offset after them.
fn front_decoded(
    text: &mut String,
    blob: &[u8],
    at: usize,
    shared: usize,
    rest: usize,
) -> Result<usize, ContactLogError> {
    let suffix = blob
        .get(at..at + rest)
        .ok_or(ContactLogError::Truncated { at })?;
    if shared > text.len() {
        return Err(ContactLogError::BadPrefix {
            at,
            shared,
            len: text.len(),
        });
    }
    let mut bytes = std::mem::take(text).into_bytes();
    bytes.truncate(shared);
    bytes.extend_from_slice(suffix);
    *text = String::from_utf8(bytes).map_err(|e| ContactLogError::NotUtf8 {
        at,
        cause: e.to_string(),
    })?;
    Ok(at + rest)
}

fn field<const N: usize>(blob: &[u8], at: usize) -> Result<[u8; N], ContactLogError> {
    blob.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(ContactLogError::Truncated { at })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: &str, time: &str) -> NodeWrite {
        NodeWrite::Seen {
            node_id: id.into(),
            last_heartbeat: time.parse().unwrap(),
        }
    }

    fn decoded(blob: &[u8]) -> Vec<(String, String)> {
        let mut entries = Vec::new();
        decode(blob, |id, time| entries.push((id.into(), time.to_string()))).unwrap();
        entries
    }

    #[test]
    fn entries_read_back_in_node_order_and_front_coded() {
        let mut encoder = Encoder::default();
        // Times earlier and later than the one before, with and without fractions and
        // offsets, before the epoch and far after it: each reads back as it was written.
        let batch = [
            seen("node-b", "2026-11-30T10:00:00.123456789Z"),
            NodeWrite::Delete("node-x".into()),
            seen("nöde-ä", "2026-11-30T10:00:01Z"),
            seen("node-a", "2026-11-30T10:00:00Z"),
            seen("node-a", "2026-11-30T10:00:02Z"),
            seen("node-c", "1969-12-31T23:59:59.5-05:30"),
            seen("node-d", "9999-12-31T23:59:59.999999999+14:00"),
        ];
        let blob = encoder.encode(&batch).unwrap().unwrap().to_vec();
        assert_eq!(blob[0], FORMAT);
        assert_eq!(
            decoded(&blob),
            [
                ("node-a", "2026-11-30T10:00:00Z"),
                ("node-a", "2026-11-30T10:00:02Z"),
                ("node-b", "2026-11-30T10:00:00.123456789Z"),
                ("node-c", "1969-12-31T23:59:59.500-05:30"),
                ("node-d", "9999-12-31T23:59:59.999999999+14:00"),
                ("nöde-ä", "2026-11-30T10:00:01Z"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // A batch of a fleet: under twelve bytes a node, where its id and time as text are 34.
        let fleet: Vec<_> = (0..1000)
            .map(|i| {
                seen(
                    &format!("node-{i:05}"),
                    &format!("2026-11-30T10:00:0{}.{i:03}Z", i % 2),
                )
            })
            .collect();
        let blob = encoder.encode(&fleet).unwrap().unwrap();
        assert!(blob.len() < 1000 * 12, "{} bytes", blob.len());
        // Its buffers are reused, and a batch without contacts has no blob.
        assert_eq!(encoder.encode(&batch[1..2]).unwrap(), None);
    }

    #[test]
    fn a_damaged_blob_is_refused_with_where() {
        let mut encoder = Encoder::default();
        let blob = encoder
            .encode(&[seen("node-a", "2026-11-30T10:00:00Z")])
            .unwrap()
            .unwrap()
            .to_vec();
        // [2] [0, 6, 0] node-a, then the time's varints from byte 10: seconds (5 bytes),
        // nanoseconds and offset (a byte each).
        assert_eq!(blob.len(), 17);
        assert_eq!(
            decode(&blob[..blob.len() - 3], |_, _| {})
                .unwrap_err()
                .to_string(),
            "truncated or overlong number at byte 10"
        );
        let mut bad = blob.clone();
        bad[4] = 0xff;
        let error = decode(&bad, |_, _| {}).unwrap_err().to_string();
        assert!(error.contains("not UTF-8 at byte 4"), "{error}");
        let mut bad = blob.clone();
        bad[1] = 3;
        let error = decode(&bad, |_, _| {}).unwrap_err().to_string();
        assert_eq!(error, "byte 4 continues 3 bytes of a 0-byte string");
        // An offset of a day is no offset.
        let mut bad = blob[..16].to_vec();
        bad.extend_from_slice(&86_400i32.encode_var_vec());
        let error = decode(&bad, |_, _| {}).unwrap_err().to_string();
        assert!(
            error.starts_with("byte 10: ") && error.ends_with("is not a time"),
            "{error}"
        );
        // Ids out of order (node-b, then node-a against it) are no blob of this format;
        // found by the contact-log fuzz target (docs/reliability/parser-fuzz.md).
        let two = encoder
            .encode(&[
                seen("node-a", "2026-11-30T10:00:00Z"),
                seen("node-b", "2026-11-30T10:00:00Z"),
            ])
            .unwrap()
            .unwrap()
            .to_vec();
        let mut swapped = two.clone();
        swapped[9] = b'b';
        swapped[17 + 3] = b'a';
        assert_eq!(
            decode(&swapped, |_, _| {}).unwrap_err(),
            ContactLogError::OutOfOrder { at: 20 }
        );
        decode(&two, |_, _| {}).unwrap();
        assert_eq!(
            decode(&[], |_, _| {}).unwrap_err().to_string(),
            "empty contact log entry"
        );
        assert_eq!(
            decode(&[9], |_, _| {}).unwrap_err().to_string(),
            "unknown contact log format 9"
        );
    }

    #[test]
    fn blobs_of_earlier_builds_with_text_times_still_read() {
        // Format 1: node-a at 10:00:05Z, node-b front-coded against it.
        let mut blob = vec![FORMAT_TEXT, 0, 6, 0];
        blob.extend_from_slice(b"node-a");
        blob.extend_from_slice(&[0, 20]);
        blob.extend_from_slice(b"2026-11-30T10:00:05Z");
        blob.extend_from_slice(&[5, 1, 0, b'b', 18, 5]);
        blob.extend_from_slice(b"7.25Z");
        assert_eq!(
            decoded(&blob),
            [
                ("node-a", "2026-11-30T10:00:05Z"),
                ("node-b", "2026-11-30T10:00:07.250Z"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // A time that is not one says where.
        let bad_time = b"2026-13-30T10:00:05Z";
        blob[12..32].copy_from_slice(bad_time);
        let error = decode(&blob, |_, _| {}).unwrap_err().to_string();
        assert!(error.starts_with("byte 12: "), "{error}");
    }

    #[test]
    fn merged_batches_give_each_node_once_with_its_latest_time_in_node_order() {
        let mut encoder = Encoder::default();
        let mut blob = |entries: &[(&str, u32)]| {
            let batch: Vec<_> = entries
                .iter()
                .map(|(id, s)| seen(id, &format!("2026-11-30T10:00:{s:02}Z")))
                .collect();
            encoder.encode(&batch).unwrap().unwrap().to_vec()
        };
        let blobs = [
            blob(&[("b", 1), ("a", 1), ("d", 1)]),
            blob(&[("c", 2), ("a", 2)]),
            blob(&[("d", 3), ("a", 3), ("a", 4)]),
            blob(&[("e", 4)]),
        ];
        let blobs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        let mut merged = Vec::new();
        for_each_latest(&blobs, |id, time| {
            merged.push(format!("{id}={}", time.as_datetime().timestamp() % 60));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(merged, ["a=4", "b=1", "c=2", "d=3", "e=4"]);
        // Nothing to merge; a damaged blob is named by its index.
        for_each_latest(&[], |_, _| -> Result<(), ()> { panic!("no entries") }).unwrap();
        let damaged = [blobs[0], &blobs[1][..4]];
        let error = for_each_latest(&damaged, |_, _| Ok::<(), ()>(())).unwrap_err();
        let truncated = ContactLogError::Truncated { at: 4 };
        assert_eq!(
            error,
            MergeError::Damaged {
                blob: 1,
                error: truncated
            }
        );
        // The callback's error stops the merge.
        let stopped = for_each_latest(&blobs, |id, _| {
            if id == "c" {
                Err(id.to_string())
            } else {
                Ok(())
            }
        });
        assert_eq!(stopped, Err(MergeError::Stopped("c".to_string())));
    }

    #[test]
    fn merged_into_one_blob_the_batches_read_back_the_same_less_what_is_left_out() {
        let mut encoder = Encoder::default();
        let batches: Vec<Vec<u8>> = [
            vec![
                seen("node-b", "2026-11-30T10:00:01Z"),
                seen("node-a", "2026-11-30T10:00:01Z"),
            ],
            vec![
                seen("node-c", "2026-11-30T10:00:02.5+02:00"),
                seen("node-a", "2026-11-30T10:00:02Z"),
            ],
            vec![
                seen("node-b", "1969-12-31T23:59:59Z"),
                seen("node-d", "2026-11-30T10:00:03Z"),
            ],
        ]
        .iter()
        .map(|batch| encoder.encode(batch).unwrap().unwrap().to_vec())
        .collect();
        let blobs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
        let latest = |blobs: &[&[u8]]| {
            let mut entries = Vec::new();
            for_each_latest(blobs, |id, time| {
                entries.push((id.to_string(), time.to_string()));
                Ok::<(), ()>(())
            })
            .unwrap();
            entries
        };
        let mut folded = vec![9; 3];
        assert_eq!(merge(&blobs, |_| true, &mut folded).unwrap(), 4);
        assert_eq!(decoded(&folded), latest(&blobs));
        // A later batch still wins over the folded one.
        let later = encoder
            .encode(&[seen("node-a", "2026-11-30T10:00:04Z")])
            .unwrap()
            .unwrap()
            .to_vec();
        let mut on_top = Vec::new();
        merge(&[&folded, &later], |_| true, &mut on_top).unwrap();
        assert_eq!(
            decoded(&on_top)[0],
            ("node-a".to_string(), "2026-11-30T10:00:04Z".to_string())
        );
        // Nodes left out are gone, whichever batch had them.
        assert_eq!(merge(&blobs, |id| id != "node-b", &mut folded).unwrap(), 3);
        let ids: Vec<String> = decoded(&folded).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["node-a", "node-c", "node-d"]);
        assert_eq!(merge(&blobs, |_| false, &mut folded).unwrap(), 0);
        assert_eq!(folded, [FORMAT]);
        // A damaged batch is named.
        let error = merge(&[blobs[0], &blobs[1][..5]], |_| true, &mut folded).unwrap_err();
        assert!(
            matches!(error, MergeError::Damaged { blob: 1, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn writes_left_out_by_index_are_not_encoded() {
        let batch = [
            seen("node-a", "2026-11-30T10:00:00Z"),
            seen("node-b", "2026-11-30T10:00:01Z"),
            seen("node-a", "2026-11-30T10:00:02Z"),
        ];
        let mut encoder = Encoder::default();
        let blob = encoder.encode_where(&batch, |i| i != 0).unwrap().unwrap();
        assert_eq!(
            decoded(blob),
            [
                ("node-a", "2026-11-30T10:00:02Z"),
                ("node-b", "2026-11-30T10:00:01Z")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(encoder.encode_where(&batch, |_| false).unwrap(), None);
    }

    #[test]
    fn the_sort_key_orders_like_the_ids_up_to_ties() {
        let ids = [
            "",
            "a",
            "a\u{0}",
            "a\u{0}b",
            "ab",
            "abcdefgh",
            "abcdefgh\u{0}",
            "abcdefghi",
            "abcdefgi",
            "b",
            "nöde",
            "node-0000100",
            "node-0000099",
            "ÿ",
        ];
        for a in ids {
            for b in ids {
                let (ka, kb) = (sort_key(a.as_bytes()), sort_key(b.as_bytes()));
                if ka != kb {
                    assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} {b:?}");
                }
            }
        }
        // A batch with a long common prefix comes out in id order, duplicates in batch order.
        let batch: Vec<_> = [
            "fleet-x-0003",
            "fleet-x-0001",
            "fleet-x-0003",
            "fleet-x-0002",
        ]
        .iter()
        .enumerate()
        .map(|(i, id)| seen(id, &format!("2026-11-30T10:00:0{i}Z")))
        .collect();
        let blob = Encoder::default().encode(&batch).unwrap().unwrap().to_vec();
        let order: Vec<String> = decoded(&blob)
            .into_iter()
            .map(|(id, t)| format!("{id}@{}", &t[18..19]))
            .collect();
        assert_eq!(
            order,
            [
                "fleet-x-0001@1",
                "fleet-x-0002@3",
                "fleet-x-0003@0",
                "fleet-x-0003@2"
            ]
        );
    }

    #[test]
    fn an_overlong_id_is_refused_not_truncated() {
        let long = "x".repeat(70_000);
        let error = Encoder::default()
            .encode(&[seen(&long, "2026-11-30T10:00:00Z")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("too long"), "{error}");
    }
}
