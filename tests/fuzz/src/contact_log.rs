//! Target 4: the contact-log decoder (`store::contact_log`: `Decoder`, `for_each_latest`,
//! `merge`) on blobs as a damaged or hostile store row would hold them. The input is split
//! into up to eight blobs (batches, in write order) at each [`SEPARATOR`].
//!
//! Properties:
//! - every blob decodes or is refused with a byte offset inside the blob;
//! - a blob that decodes keeps the format's promise: its ids in order (a node may appear more
//!   than once in a batch, the later entry winning);
//! - when all decode, `for_each_latest` gives each node once, in id order, at its latest time
//!   (the last batch that has it, the last entry there), as a map filled batch by batch would;
//!   `merge` writes exactly that as one blob, which decodes back the same, merges into itself
//!   byte for byte, leaves out what `keep` refuses, and the `Encoder` re-encodes the same;
//! - when one does not, both refuse and name a blob that does not decode on its own.

use std::collections::BTreeMap;

use fleetwire::store::contact_log::{
    for_each_latest, merge, ContactLogError, Decoder, Encoder, MergeError,
};
use fleetwire::store::NodeWrite;
use fleetwire_types::Timestamp;

/// Between two blobs of an input (bytes that never occur in UTF-8 text).
pub const SEPARATOR: &[u8] = b"\xF8\xF9\xFA\xFB";
const MAX_BLOBS: usize = 8;

/// The blobs an input stands for.
pub fn blobs(data: &[u8]) -> Vec<&[u8]> {
    let mut blobs = Vec::new();
    let mut rest = data;
    while blobs.len() + 1 < MAX_BLOBS {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                blobs.push(&rest[..at]);
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    blobs.push(rest);
    blobs
}

/// Joins blobs into one input, as [`blobs`] splits it.
pub fn join(blobs: &[&[u8]]) -> Vec<u8> {
    blobs.join(SEPARATOR)
}

/// Nothing to set up before the fuzzer's loop.
pub fn prepare() {}

type Entries = Vec<(String, Timestamp)>;

/// A blob's entries, or where it was refused.
fn decode(blob: &[u8]) -> Result<Entries, ContactLogError> {
    let mut decoder = Decoder::new(blob)?;
    let mut entries = Vec::new();
    while decoder.advance()? {
        entries.push((decoder.id().to_string(), decoder.time()));
    }
    Ok(entries)
}

/// The byte offset an error names, if it names one.
fn offset(error: &ContactLogError) -> Option<usize> {
    match error {
        ContactLogError::Truncated { at }
        | ContactLogError::BadNumber { at }
        | ContactLogError::NotATime { at, .. }
        | ContactLogError::BadTextTime { at, .. }
        | ContactLogError::BadPrefix { at, .. }
        | ContactLogError::NotUtf8 { at, .. }
        | ContactLogError::OutOfOrder { at } => Some(*at),
        ContactLogError::IdTooLong { .. }
        | ContactLogError::UnknownFormat { .. }
        | ContactLogError::Empty => None,
    }
}

pub fn check(data: &[u8]) {
    let blobs = blobs(data);
    let decoded: Vec<Result<Entries, ContactLogError>> = blobs.iter().map(|b| decode(b)).collect();
    for (blob, result) in blobs.iter().zip(&decoded) {
        match result {
            Ok(entries) => {
                for pair in entries.windows(2) {
                    assert!(
                        pair[0].0 <= pair[1].0,
                        "a blob decodes with its ids out of order: {:?} before {:?}",
                        pair[0].0,
                        pair[1].0
                    );
                }
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                if let Some(at) = offset(error) {
                    assert!(
                        at <= blob.len(),
                        "{error} in a blob of {} bytes",
                        blob.len()
                    );
                }
            }
        }
    }

    let mut latest = Vec::new();
    let merged = for_each_latest(&blobs, |id, time| {
        latest.push((id.to_string(), time));
        Ok::<(), ()>(())
    });
    let mut folded = Vec::new();
    let folded_count = merge(&blobs, |_| true, &mut folded);

    if decoded.iter().any(Result::is_err) {
        let named = [
            match merged {
                Err(MergeError::Damaged { blob, .. }) => blob,
                other => panic!("a damaged blob is merged: {other:?}"),
            },
            match folded_count {
                Err(MergeError::Damaged { blob, .. }) => blob,
                other => panic!("a damaged blob is folded: {other:?}"),
            },
        ];
        for blob in named {
            assert!(
                decoded[blob].is_err(),
                "blob {blob} is named damaged but decodes"
            );
        }
        return;
    }

    let mut expected: BTreeMap<String, Timestamp> = BTreeMap::new();
    for entries in decoded.iter().flatten() {
        for (id, time) in entries {
            expected.insert(id.clone(), *time);
        }
    }
    let expected: Entries = expected.into_iter().collect();
    merged.expect("blobs that decode merge");
    assert_eq!(show(&latest), show(&expected), "for_each_latest");

    let count = folded_count.expect("blobs that decode fold");
    assert_eq!(count, expected.len());
    let refolded = decode(&folded).expect("a folded blob decodes");
    assert_eq!(show(&refolded), show(&expected), "the folded blob");
    let mut again = Vec::new();
    merge(&[&folded], |_| true, &mut again).expect("a folded blob folds");
    assert_eq!(again, folded, "folding is not a fixed point");

    let keep = |id: &str| id.len().is_multiple_of(2);
    merge(&blobs, keep, &mut again).expect("blobs that decode fold");
    let kept: Entries = expected
        .iter()
        .filter(|(id, _)| keep(id))
        .cloned()
        .collect();
    assert_eq!(show(&decode(&again).expect("decodes")), show(&kept), "keep");

    // The writer's encoder codes the same entries the same way, whatever format they came in.
    let batch: Vec<NodeWrite> = decoded
        .iter()
        .flatten()
        .flatten()
        .map(|(id, time)| NodeWrite::Seen {
            node_id: id.as_str().into(),
            last_heartbeat: *time,
        })
        .collect();
    let mut encoder = Encoder::default();
    if let Some(blob) = encoder
        .encode(&batch)
        .expect("ids within the format's bounds")
    {
        let mut from_encoder = Vec::new();
        merge(&[blob], |_| true, &mut from_encoder).expect("an encoded blob folds");
        assert_eq!(from_encoder, folded, "the encoder and the fold disagree");
    } else {
        assert!(expected.is_empty());
    }
}

/// Entries as text, with each time as written and as an instant, for comparisons that say
/// what differs.
fn show(entries: &Entries) -> Vec<String> {
    entries
        .iter()
        .map(|(id, t)| {
            let at = t.as_datetime();
            format!(
                "{id:?}@{t} ({} s {} ns {:+} s)",
                at.timestamp(),
                at.timestamp_subsec_nanos(),
                at.offset().local_minus_utc()
            )
        })
        .collect()
}
