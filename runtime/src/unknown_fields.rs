//! Where unknown fields of peer documents are reported: the metric, the log and the answer.
//!
//! fleetwire's policy (README "Unknown fields", docs/interop.md): a document read from a peer
//! keeps what its schema knows and sets aside the fields a closed object does not define
//! ([`fleetwire_types::read`]); every program reports them here. The metric counts every field
//! set aside, by document; the log names each (document, field) once per process, with array
//! indices folded, so a chatty peer sending the same field in every heartbeat writes one line;
//! a peer inventing names writes at most [`MAX_LOGGED_PER_PEER`] lines, charged to who it is
//! (a node, an operator, a client's address: [`Caller`]), so one stranger never uses up the
//! lines of everybody else (issue 28), and the process at most [`MAX_LOGGED`]; an HTTP answer
//! carries one `Warning: 299` header per field, at most [`MAX_WARNINGS`], as Kubernetes does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use fleetwire_types::{Accepted, JsonPointer, WireDocument};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// At most this many `Warning` headers on one answer; one more says how many were left out.
pub const MAX_WARNINGS: usize = 20;
/// At most this many distinct (document, field) pairs are logged per process: a bound on the
/// memory the log's memory of them takes.
pub const MAX_LOGGED: usize = 4096;
/// At most this many of them are logged for one peer (one [`Caller`], one file, one URL).
pub const MAX_LOGGED_PER_PEER: usize = 32;
/// A field's pointer is cut to this many characters in headers and logs.
const MAX_POINTER_CHARS: usize = 200;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DocumentLabels {
    document: &'static str,
}

/// The counter family shared by every registry this process renders.
fn counter() -> &'static Family<DocumentLabels, Counter> {
    static COUNTER: OnceLock<Family<DocumentLabels, Counter>> = OnceLock::new();
    COUNTER.get_or_init(Family::default)
}

/// Registers `unknown_fields` (a counter: `<prefix>_unknown_fields_total{document="..."}`)
/// in `registry`.
pub fn register(registry: &mut Registry) {
    registry.register(
        "unknown_fields",
        "Fields of peer documents that their schema does not define, set aside and reported, by document",
        counter().clone(),
    );
}

/// How many unknown fields this process has set aside in documents called `document`.
pub fn count(document: &str) -> u64 {
    counter()
        .get_or_create(&DocumentLabels {
            document: static_name(document),
        })
        .get()
}

fn static_name(document: &str) -> &'static str {
    fleetwire_types::document(document)
        .map(|d| d.name)
        .unwrap_or("other")
}

/// Reports the unknown fields of a document read from `peer` (e.g. `"request body"`,
/// `"GET http://10.0.0.5:8080/capacity"`): the metric and the log. Free when there are none.
#[inline]
pub fn note<T: WireDocument>(accepted: &Accepted<T>, peer: &str) {
    if !accepted.unknown_fields.is_empty() {
        note_fields(T::INFO.name, &accepted.unknown_fields, peer);
    }
}

/// Who sent a request, as the server learned it before reading the body (the connection's
/// certificate, the operator token's name, else the client's address): put on the request by
/// the server, read by the body's reader, so that what the body's unknown fields cost in log
/// lines is charged to its sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub Arc<str>);

impl Caller {
    /// What a request without a [`Caller`] is charged to.
    pub const UNKNOWN: &'static str = "request body";

    /// The caller of `request`, or [`Caller::UNKNOWN`].
    pub fn of(extensions: &axum::http::Extensions) -> Arc<str> {
        extensions
            .get::<Caller>()
            .map_or_else(|| Arc::from(Self::UNKNOWN), |caller| caller.0.clone())
    }
}

/// The log lines written so far: each (document, field) once, and how many each peer used.
#[derive(Default)]
struct Logged {
    fields: HashSet<(&'static str, String)>,
    /// Lines by peer; only peers that wrote one are here, so it is no larger than `fields`.
    by_peer: HashMap<String, usize>,
}

/// [`note`] for a document known by name, charged to `peer`. Returns how many log lines it
/// wrote (for tests).
pub fn note_fields(document: &'static str, fields: &[JsonPointer], peer: &str) -> usize {
    counter()
        .get_or_create(&DocumentLabels { document })
        .inc_by(fields.len() as u64);
    static LOGGED: OnceLock<Mutex<Logged>> = OnceLock::new();
    let mut logged = LOGGED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let logged = &mut *logged;
    let peer = printable(peer);
    let mut used = logged.by_peer.get(&peer).copied().unwrap_or(0);
    let mut lines = 0;
    for field in fields {
        if logged.fields.len() >= MAX_LOGGED || used >= MAX_LOGGED_PER_PEER {
            break;
        }
        // Cut to a printable, bounded form before it is kept: a peer chooses the name.
        let shape = printable(&fold_indices(field.as_str()));
        if logged.fields.insert((document, shape.clone())) {
            lines += 1;
            used += 1;
            tracing::warn!(
                document,
                field = %shape,
                peer = %peer,
                "unknown field set aside: the schema does not define it (logged once per document and field)"
            );
            if used == MAX_LOGGED_PER_PEER {
                tracing::warn!(
                    peer = %peer,
                    "{MAX_LOGGED_PER_PEER} distinct unknown fields logged for this peer; its further ones are only counted (fleetwire_*_unknown_fields_total)"
                );
            }
            if logged.fields.len() == MAX_LOGGED {
                tracing::warn!(
                    "{MAX_LOGGED} distinct unknown fields logged; further ones are only counted (fleetwire_*_unknown_fields_total)"
                );
            }
        }
    }
    if lines > 0 {
        logged.by_peer.insert(peer, used);
    }
    lines
}

/// `/vms/3/gpu` → `/vms/*/gpu`: the same field in every item is one field.
fn fold_indices(pointer: &str) -> String {
    pointer
        .split('/')
        .map(|segment| {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                "*"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Printable ASCII only, cut to [`MAX_POINTER_CHARS`]: a peer chooses these names.
fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_POINTER_CHARS)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    if text.chars().count() > MAX_POINTER_CHARS {
        out.push_str("...");
    }
    out
}

/// The `Warning` headers for `fields` (RFC 9111 §5.5 syntax, code 299 as Kubernetes uses):
/// `299 - "unknown field /x/y"`, at most [`MAX_WARNINGS`], then one saying how many more.
pub fn warning_headers(fields: &[JsonPointer]) -> Vec<HeaderValue> {
    let mut out: Vec<HeaderValue> = fields
        .iter()
        .take(MAX_WARNINGS)
        .map(|field| warning(&format!("unknown field {}", field.as_str())))
        .collect();
    if fields.len() > MAX_WARNINGS {
        out.push(warning(&format!(
            "{} more unknown fields not listed",
            fields.len() - MAX_WARNINGS
        )));
    }
    out
}

fn warning(text: &str) -> HeaderValue {
    let quoted: String = printable(text)
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    HeaderValue::from_str(&format!("299 - \"{quoted}\""))
        .expect("printable ASCII is a valid header value")
}

/// Adds the `Warning` headers for `fields` to `headers`.
pub fn add_warnings(headers: &mut HeaderMap, fields: &[JsonPointer]) {
    for value in warning_headers(fields) {
        headers.append(axum::http::header::WARNING, value);
    }
}

/// Where a request's extractor leaves the unknown fields of its body for the answer's
/// `Warning` headers: the HTTP layer's body extractor fills it (this module knows nothing of
/// that layer, which imports it), [`answer_with_warnings`] empties it.
#[derive(Clone, Default)]
pub struct WarningSlot(Arc<Mutex<Vec<JsonPointer>>>);

impl WarningSlot {
    pub fn put(&self, fields: &[JsonPointer]) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(fields);
    }

    fn take(&self) -> Vec<JsonPointer> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Middleware of every router that reads peer bodies with `Valid<T>`: gives the request a
/// [`WarningSlot`] and turns what the extractor put in it into `Warning` headers.
pub async fn answer_with_warnings(mut request: Request, next: Next) -> Response {
    let slot = WarningSlot::default();
    request.extensions_mut().insert(slot.clone());
    let mut response = next.run(request).await;
    let fields = slot.take();
    if !fields.is_empty() {
        add_warnings(response.headers_mut(), &fields);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointers(texts: &[&str]) -> Vec<JsonPointer> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn warning_headers_are_capped_and_escaped() {
        let many: Vec<String> = (0..25).map(|i| format!("/f{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let headers = warning_headers(&pointers(&refs));
        assert_eq!(headers.len(), MAX_WARNINGS + 1);
        assert_eq!(headers[0], "299 - \"unknown field /f0\"");
        assert_eq!(
            headers[MAX_WARNINGS],
            "299 - \"5 more unknown fields not listed\""
        );
        let odd = warning_headers(&pointers(&["/a\"b\\c/é\n"]));
        assert_eq!(odd[0], "299 - \"unknown field /a\\\"b\\\\c/??\"");
    }

    #[test]
    fn each_document_and_field_is_logged_once() {
        let first = pointers(&["/vms/0/logOnceProbe", "/vms/1/logOnceProbe", "/logOnceTop"]);
        assert_eq!(note_fields("NodeHeartbeat", &first, "n1"), 2);
        // The same fields again, in other items and from another peer: counted, not logged.
        let again = pointers(&["/vms/7/logOnceProbe", "/logOnceTop"]);
        assert_eq!(note_fields("NodeHeartbeat", &again, "n2"), 0);
        // The same field in another document is another line.
        assert_eq!(
            note_fields("VmRecord", &pointers(&["/logOnceTop"]), "n1"),
            1
        );
    }

    #[test]
    fn one_peer_uses_up_its_own_lines_and_not_the_others() {
        let many: Vec<String> = (0..MAX_LOGGED_PER_PEER + 10)
            .map(|i| format!("/perPeerProbe{i}"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            note_fields("NodeHeartbeat", &pointers(&refs), "node chatty"),
            MAX_LOGGED_PER_PEER
        );
        // Its next new field is only counted; another peer's is logged.
        assert_eq!(
            note_fields(
                "NodeHeartbeat",
                &pointers(&["/perPeerProbeNew"]),
                "node chatty"
            ),
            0
        );
        assert_eq!(
            note_fields(
                "NodeHeartbeat",
                &pointers(&["/perPeerProbeNew"]),
                "node quiet"
            ),
            1
        );
    }

    #[test]
    fn indices_are_folded_for_the_log() {
        assert_eq!(fold_indices("/vms/3/gpu"), "/vms/*/gpu");
        assert_eq!(fold_indices("/a1/2x"), "/a1/2x");
        assert_eq!(fold_indices(""), "");
    }

    #[test]
    fn the_metric_counts_every_field_by_document() {
        let before = count("CreateVmRequest");
        note_fields("CreateVmRequest", &pointers(&["/x", "/y"]), "test");
        assert_eq!(count("CreateVmRequest"), before + 2);
        let mut registry = Registry::with_prefix("fleetwire_test");
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("fleetwire_test_unknown_fields_total{document=\"CreateVmRequest\"}"),
            "{text}"
        );
    }
}
