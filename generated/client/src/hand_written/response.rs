//! An operation's answer ([`ResponseValue`]) and how each kind of body the API document
//! declares is read: JSON documents through `fleetwire_types::read` (the unknown-field policy,
//! README "Unknown fields": fields the schema does not define are set aside and reported in
//! [`ResponseValue::unknown_fields`]), lists of them item by item, text, no body; and the
//! refusals, read as `ApiError`.

use std::ops::Deref;

use fleetwire_types::{
    read, read_value, ApiError, JsonPointer, Rejection, Violation, WireDocument,
};
use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};

use crate::error::Error;

/// The most an answer's body may hold (`ClientBuilder::max_answer_bytes`), carried on the
/// response from `Client::send` to the body readers here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerLimit(pub(crate) usize);

/// How much of an undeclared answer's body [`Error::UnexpectedStatus`] quotes (not a schema
/// limit).
const QUOTED_BODY_CHARS: usize = 300;

/// A successful answer: the typed body (also reached through `Deref`: `answer.node_id`), and
/// what came with it. Only `value` is a field, so the body's own fields (a `NodeRecord`'s
/// `status`) are not hidden behind the answer's.
#[derive(Debug, Clone)]
pub struct ResponseValue<T> {
    /// The body, as its schema knows it.
    pub value: T,
    http_status: StatusCode,
    http_headers: HeaderMap,
    unknown: Vec<JsonPointer>,
}

impl<T> ResponseValue<T> {
    fn new(value: T, status: StatusCode, headers: HeaderMap, unknown: Vec<JsonPointer>) -> Self {
        ResponseValue {
            value,
            http_status: status,
            http_headers: headers,
            unknown,
        }
    }

    /// The body, dropping the rest.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The status: one the document declares for this operation and this body (e.g. `/readyz`
    /// answers a `Health` with 200 and with 503).
    pub fn status(&self) -> StatusCode {
        self.http_status
    }

    /// The answer's headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.http_headers
    }

    /// The JSON pointers of the fields of the body its schema does not define, set aside to
    /// read it (a newer controller's additions); empty when the body was valid as it came.
    pub fn unknown_fields(&self) -> &[JsonPointer] {
        &self.unknown
    }

    /// The text of each `Warning` header of the answer (the controller names each unknown
    /// field of the request this way: `unknown field /pointer`).
    pub fn warnings(&self) -> Vec<String> {
        warnings(&self.http_headers)
    }
}

impl<T> Deref for ResponseValue<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// The quoted text of each `Warning: 299 - "text"` header (RFC 7234's form); a header in
/// another form is given whole.
pub fn warnings(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(reqwest::header::WARNING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .map(|value| {
            let quoted = value
                .split_once('"')
                .and_then(|(_, rest)| rest.rsplit_once('"'))
                .map(|(text, _)| text);
            quoted.unwrap_or(value).to_string()
        })
        .collect()
}

async fn body(
    operation: &'static str,
    mut response: Response,
) -> Result<(StatusCode, HeaderMap, Vec<u8>), Error> {
    let status = response.status();
    let headers = response.headers().clone();
    let limit = response.extensions().get::<AnswerLimit>().map(|l| l.0);
    let too_large = |limit| Error::AnswerTooLarge {
        operation,
        status,
        limit,
    };
    // Refused at once when the declared length says so, else chunk by chunk.
    if let (Some(limit), Some(length)) = (limit, response.content_length()) {
        if length > limit as u64 {
            return Err(too_large(limit));
        }
    }
    let mut bytes = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|source| Error::Transport {
            operation,
            message: format!("reading the {status} answer: {}", with_causes(&source)),
            source,
        })?;
        let Some(chunk) = chunk else { break };
        if let Some(limit) = limit.filter(|&limit| bytes.len() + chunk.len() > limit) {
            return Err(too_large(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((status, headers, bytes))
}

fn invalid(
    operation: &'static str,
    status: StatusCode,
    expected: &'static str,
    rejection: Rejection,
) -> Error {
    Error::InvalidResponse {
        operation,
        status,
        expected,
        violations: rejection.violations().to_vec(),
    }
}

/// A JSON body: one root document.
pub async fn json<T: WireDocument>(
    operation: &'static str,
    response: Response,
) -> Result<ResponseValue<T>, Error> {
    let (status, headers, bytes) = body(operation, response).await?;
    let accepted = read::<T>(&bytes).map_err(|r| invalid(operation, status, T::INFO.name, r))?;
    Ok(ResponseValue::new(
        accepted.value,
        status,
        headers,
        accepted.unknown_fields,
    ))
}

/// A JSON array of root documents, each read as [`json`] reads one; pointers (of unknown
/// fields and of violations) are into the whole array.
pub async fn json_list<T: WireDocument>(
    operation: &'static str,
    response: Response,
) -> Result<ResponseValue<Vec<T>>, Error> {
    let (status, headers, bytes) = body(operation, response).await?;
    let expected = T::INFO.name;
    let fail = |violations| Error::InvalidResponse {
        operation,
        status,
        expected,
        violations,
    };
    let items: Vec<serde_json::Value> = match serde_json::from_slice(&bytes) {
        Ok(serde_json::Value::Array(items)) => items,
        Ok(_) => return Err(fail(vec![violation("", "type", "not an array")])),
        Err(e) => return Err(fail(vec![violation("", "json", &e.to_string())])),
    };
    let mut value = Vec::with_capacity(items.len());
    let mut unknown_fields = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = |pointer: &JsonPointer| prefixed(index, pointer);
        match read_value::<T>(item) {
            Ok(accepted) => {
                unknown_fields.extend(accepted.unknown_fields.iter().map(at));
                value.push(accepted.value);
            }
            Err(rejection) => {
                let violations = rejection
                    .violations()
                    .iter()
                    .map(|v| Violation {
                        instance_path: at(&v.instance_path),
                        ..v.clone()
                    })
                    .collect();
                return Err(fail(violations));
            }
        }
    }
    Ok(ResponseValue::new(value, status, headers, unknown_fields))
}

fn prefixed(index: usize, pointer: &JsonPointer) -> JsonPointer {
    format!("/{index}{}", pointer.as_str())
        .parse()
        .expect("a pointer behind an index is a pointer")
}

fn violation(pointer: &str, keyword: &str, message: &str) -> Violation {
    Violation {
        instance_path: pointer.parse().expect("a JSON pointer"),
        keyword: keyword.to_string(),
        message: message.to_string(),
        schema_path: "".parse().expect("the empty pointer"),
    }
}

/// A text body (e.g. the metrics page).
pub async fn text(
    operation: &'static str,
    response: Response,
) -> Result<ResponseValue<String>, Error> {
    let (status, headers, bytes) = body(operation, response).await?;
    let value = String::from_utf8(bytes).map_err(|e| Error::InvalidResponse {
        operation,
        status,
        expected: "text",
        violations: vec![violation("", "utf-8", &e.to_string())],
    })?;
    Ok(ResponseValue::new(value, status, headers, Vec::new()))
}

/// An answer the document declares without a body: whatever comes is not read.
pub async fn empty(
    operation: &'static str,
    response: Response,
) -> Result<ResponseValue<()>, Error> {
    let (status, headers, _) = body(operation, response).await?;
    Ok(ResponseValue::new((), status, headers, Vec::new()))
}

/// A refusal the document declares as an `ApiError`: [`Error::Api`], or
/// [`Error::InvalidResponse`] when the body is not one.
pub async fn api_error<T>(operation: &'static str, response: Response) -> Result<T, Error> {
    let (status, _, bytes) = body(operation, response).await?;
    Err(match read::<ApiError>(&bytes) {
        Ok(accepted) => Error::Api {
            operation,
            status,
            error: Box::new(accepted.value),
        },
        Err(rejection) => invalid(operation, status, ApiError::INFO.name, rejection),
    })
}

/// A status the document does not declare for the operation.
pub async fn unexpected<T>(operation: &'static str, response: Response) -> Result<T, Error> {
    let (status, _, bytes) = body(operation, response).await?;
    // A success status's body is not quoted: it may carry a secret (an issued token).
    let body = if status.is_success() {
        String::new()
    } else {
        String::from_utf8_lossy(&bytes)
            .chars()
            .take(QUOTED_BODY_CHARS)
            .collect()
    };
    Err(Error::UnexpectedStatus {
        operation,
        status,
        body,
    })
}

/// An HTTP client's error with its causes: reqwest's own message leaves out why a connection
/// failed (refused, a certificate not trusted, a TLS alert), which is what an operator needs.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_give_their_text() {
        let mut headers = HeaderMap::new();
        headers.append(
            reqwest::header::WARNING,
            "299 - \"unknown field /extra\"".parse().unwrap(),
        );
        headers.append(reqwest::header::WARNING, "plain".parse().unwrap());
        assert_eq!(warnings(&headers), ["unknown field /extra", "plain"]);
    }

    #[test]
    fn pointers_into_a_list_start_with_the_index() {
        let pointer: JsonPointer = "/vms/0/state".parse().unwrap();
        assert_eq!(prefixed(3, &pointer).as_str(), "/3/vms/0/state");
    }
}
