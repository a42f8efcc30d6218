//! The row format of the contact log: the last contact times of one write-behind batch,
//! packed into one blob so that a batch costs one appended row instead of one b-tree update
//! per node.
//!
//! A blob is a format byte (`1`) followed by one entry per node, in node-id order. Both
//! strings of an entry are front-coded against the previous entry's (sorted ids and the times
//! of one batch share long prefixes, which makes a blob about a third of the plain size):
//! the id as the count of leading bytes it shares with the previous id (u8), the count of
//! bytes that follow (u16, little endian) and those bytes; then the time (RFC 3339 text,
//! exactly as the controller wrote it) the same way with a u8 count for both. A blob that
//! does not decode is reported with the byte offset where it went wrong.

use super::NodeWrite;

const FORMAT: u8 = 1;

/// Encodes the contact times of a batch; keeps its buffers from batch to batch (a batch at
/// 100,000 nodes is a megabyte of scratch that would otherwise be faulted in afresh).
#[derive(Debug, Default)]
pub struct Encoder {
    /// Indices of the batch's `Seen` writes, sorted by node id.
    order: Vec<usize>,
    blob: Vec<u8>,
}

impl Encoder {
    /// The blob of the `Seen` writes in `batch`, `None` when it has none. A node written
    /// twice keeps both entries, in batch order (the later one wins on decode).
    pub fn encode(&mut self, batch: &[NodeWrite]) -> Result<Option<&[u8]>, String> {
        self.order.clear();
        self.order.extend(
            batch
                .iter()
                .enumerate()
                .filter(|(_, w)| matches!(w, NodeWrite::Seen { .. }))
                .map(|(i, _)| i),
        );
        if self.order.is_empty() {
            return Ok(None);
        }
        // A stable sort: duplicates stay in batch order.
        self.order
            .sort_by(|&a, &b| batch[a].node_id().cmp(batch[b].node_id()));
        self.blob.clear();
        self.blob.push(FORMAT);
        let (mut last_id, mut last_time) = ("", "");
        for &i in &self.order {
            let NodeWrite::Seen {
                node_id,
                last_heartbeat,
            } = &batch[i]
            else {
                unreachable!("only Seen writes are ordered");
            };
            let id_shared = shared(last_id, node_id, u8::MAX as usize);
            let id_rest = u16::try_from(node_id.len() - id_shared)
                .map_err(|_| format!("node id {node_id:?} is too long for the contact log"))?;
            let time_shared = shared(last_time, last_heartbeat, u8::MAX as usize);
            let time_rest = u8::try_from(last_heartbeat.len() - time_shared).map_err(|_| {
                format!("contact time {last_heartbeat:?} of node {node_id:?} is too long")
            })?;
            self.blob.push(id_shared as u8);
            self.blob.extend_from_slice(&id_rest.to_le_bytes());
            self.blob
                .extend_from_slice(&node_id.as_bytes()[id_shared..]);
            self.blob.push(time_shared as u8);
            self.blob.push(time_rest);
            self.blob
                .extend_from_slice(&last_heartbeat.as_bytes()[time_shared..]);
            (last_id, last_time) = (node_id, last_heartbeat);
        }
        Ok(Some(&self.blob))
    }
}

/// How many leading bytes `a` and `b` share, at most `cap`.
fn shared(a: &str, b: &str, cap: usize) -> usize {
    a.bytes()
        .zip(b.bytes())
        .take(cap)
        .take_while(|(x, y)| x == y)
        .count()
}

/// Calls `each` with every `(node id, contact time)` of a blob, in order. On an error some
/// entries may already have been passed on: the caller fails as a whole.
pub fn decode(blob: &[u8], mut each: impl FnMut(&str, &str)) -> Result<(), String> {
    match blob.first() {
        Some(&FORMAT) => {}
        Some(other) => return Err(format!("unknown contact log format {other}")),
        None => return Err("empty contact log entry".into()),
    }
    let (mut id, mut time) = (String::new(), String::new());
    let mut at = 1;
    while at < blob.len() {
        let [id_shared] = field::<1>(blob, at)?;
        let id_rest = u16::from_le_bytes(field::<2>(blob, at + 1)?) as usize;
        at = front_decoded(&mut id, blob, at + 3, id_shared as usize, id_rest)?;
        let [time_shared, time_rest] = field::<2>(blob, at)?;
        at = front_decoded(
            &mut time,
            blob,
            at + 2,
            time_shared as usize,
            time_rest as usize,
        )?;
        each(&id, &time);
    }
    Ok(())
}

/// Rebuilds `text` as its first `shared` bytes followed by the `rest` bytes at `at` in the
/// blob; the offset after them.
fn front_decoded(
    text: &mut String,
    blob: &[u8],
    at: usize,
    shared: usize,
    rest: usize,
) -> Result<usize, String> {
    let suffix = blob
        .get(at..at + rest)
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    if shared > text.len() {
        return Err(format!(
            "byte {at} continues {shared} bytes of a {}-byte string",
            text.len()
        ));
    }
    let mut bytes = std::mem::take(text).into_bytes();
    bytes.truncate(shared);
    bytes.extend_from_slice(suffix);
    *text = String::from_utf8(bytes).map_err(|e| format!("not UTF-8 at byte {at}: {e}"))?;
    Ok(at + rest)
}

fn field<const N: usize>(blob: &[u8], at: usize) -> Result<[u8; N], String> {
    blob.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("truncated at byte {at}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: &str, time: &str) -> NodeWrite {
        NodeWrite::Seen {
            node_id: id.into(),
            last_heartbeat: time.into(),
        }
    }

    fn decoded(blob: &[u8]) -> Vec<(String, String)> {
        let mut entries = Vec::new();
        decode(blob, |id, time| entries.push((id.into(), time.into()))).unwrap();
        entries
    }

    #[test]
    fn entries_read_back_in_node_order_and_front_coded() {
        let mut encoder = Encoder::default();
        let batch = [
            seen("node-b", "2026-11-30T10:00:00.123456789Z"),
            NodeWrite::Delete("node-x".into()),
            seen("nöde-ä", "2026-11-30T10:00:01Z"),
            seen("node-a", "2026-11-30T10:00:00Z"),
            seen("node-a", "2026-11-30T10:00:02Z"),
        ];
        let blob = encoder.encode(&batch).unwrap().unwrap().to_vec();
        assert_eq!(
            decoded(&blob),
            [
                ("node-a", "2026-11-30T10:00:00Z"),
                ("node-a", "2026-11-30T10:00:02Z"),
                ("node-b", "2026-11-30T10:00:00.123456789Z"),
                ("nöde-ä", "2026-11-30T10:00:01Z"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let plain: usize = batch
            .iter()
            .filter(|w| matches!(w, NodeWrite::Seen { .. }))
            .map(|w| w.node_id().len() + 26)
            .sum();
        assert!(blob.len() < plain * 2 / 3, "{} of {plain}", blob.len());
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
        // [1] [0, 6, 0] node-a [0, 20] time: the time starts at byte 12.
        assert_eq!(
            decode(&blob[..blob.len() - 3], |_, _| {}).unwrap_err(),
            "truncated at byte 12"
        );
        let mut bad = blob.clone();
        bad[4] = 0xff;
        let error = decode(&bad, |_, _| {}).unwrap_err();
        assert!(error.contains("not UTF-8 at byte 4"), "{error}");
        let mut bad = blob.clone();
        bad[1] = 3;
        let error = decode(&bad, |_, _| {}).unwrap_err();
        assert_eq!(error, "byte 4 continues 3 bytes of a 0-byte string");
        assert_eq!(
            decode(&[], |_, _| {}).unwrap_err(),
            "empty contact log entry"
        );
        assert_eq!(
            decode(&[9], |_, _| {}).unwrap_err(),
            "unknown contact log format 9"
        );
    }

    #[test]
    fn an_overlong_id_is_refused_not_truncated() {
        let long = "x".repeat(70_000);
        let error = Encoder::default()
            .encode(&[seen(&long, "2026-11-30T10:00:00Z")])
            .unwrap_err();
        assert!(error.contains("too long"), "{error}");
    }
}
