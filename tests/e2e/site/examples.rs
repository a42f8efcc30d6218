//! Every example the reference site shows is accepted by the validated reader of its document,
//! read from the site exactly as the runtime compiles it in (and serves it under `/docs`), with
//! unknown fields refused: fleetwire's own examples carry none.

use fleetwire::reference_site as site;
use fleetwire_types::{describe, read_named_strict as read_named, DOCUMENTS};
use scraper::{Html, Selector};

#[test]
fn every_example_on_the_site_validates() {
    let examples = Selector::parse("pre.example-json[data-document]").unwrap();
    let mut checked = 0;
    let mut documents_with_examples = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for file in site::FILES.iter().filter(|f| f.path.ends_with(".html")) {
        let html = Html::parse_document(std::str::from_utf8(file.bytes).unwrap());
        for pre in html.select(&examples) {
            let document = pre.value().attr("data-document").unwrap();
            let name = pre.value().attr("data-example").unwrap_or("?");
            // The text a reader copies off the page, entities decoded.
            let text: String = pre.text().collect();
            match read_named(document, text.as_bytes()) {
                None => failures.push(format!(
                    "{}: example {name} names unknown document {document}",
                    file.path
                )),
                Some(Err(rejection)) => failures.push(format!(
                    "{}: example {name} of {document} is refused: {}",
                    file.path,
                    rejection
                        .violations()
                        .iter()
                        .map(describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Some(Ok(())) => {
                    checked += 1;
                    documents_with_examples.insert(document.to_string());
                }
            }
        }
    }
    // The downloadable copies too.
    for file in site::FILES
        .iter()
        .filter(|f| f.path.starts_with("examples/"))
    {
        let document = file.path.split('/').nth(1).unwrap();
        match read_named(document, file.bytes) {
            Some(Ok(())) => checked += 1,
            other => failures.push(format!("{}: {:?}", file.path, other.map(|r| r.is_ok()))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for doc in DOCUMENTS {
        assert!(
            documents_with_examples.contains(doc.name),
            "the site shows no example of {}",
            doc.name
        );
    }
    assert!(
        checked >= 2 * DOCUMENTS.len(),
        "only {checked} examples checked"
    );
}

#[test]
fn an_example_the_validator_refuses_would_be_caught() {
    // The check above is only worth something if a refused document is reported as such.
    let refused =
        read_named("ApiError", br#"{"code": "no_capacity"}"#).expect("ApiError is a document");
    assert!(refused.is_err());
}
