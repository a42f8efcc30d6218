//! The reference site in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`), driven over WebDriver, reading the site exactly as it is compiled into
//! `fleetwire` and served over HTTP under `/docs/` (as the controller serves it).
//!
//! It opens the index and a document page, follows a deep link to a field, runs a search (over
//! HTTP and from the folder opened as `file://`; by words, dotted path and JSON pointer, with
//! hits on the current page first), saves screenshots (light, dark, phone) under
//! `target/test-artifacts/`, and, with JavaScript disabled, checks that every field of the page
//! is still there and shown. Served by a real controller, the API page's curl lines call that
//! controller with its CA file, and no page scrolls sideways at 400 px.
//!
//! Without Chromium the test is skipped, saying what to install; under `CI=true` (where
//! `.ci/run` installs it) that fails instead (`support::have_program`).

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::controller_harness::ControllerProcess;
use crate::support::{free_port, have_program, wait_for, workspace};
use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// The whole browser session must finish well within this.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(10);

/// chromedriver, in a process group of its own: dropping it kills the driver and every
/// browser it started, even when the test fails half way.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let binary =
            std::env::var("FLEETWIRE_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let port = free_port();
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start `{binary}` ({err}): the browser test needs Debian's `chromium` and \
                     `chromium-driver` packages (apt-get install -y chromium chromium-driver)"
                )
            });
        let driver = Driver { child, port };
        wait_for("chromedriver to listen", WAIT, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        driver
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The process group this test created; Err: it is gone already.
        if let Some(group) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

/// The Chromium binary: the real one behind Debian's wrapper script when it is there.
fn chromium() -> String {
    if let Ok(path) = std::env::var("FLEETWIRE_CHROMIUM") {
        return path;
    }
    ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("chromium")
        .to_string()
}

/// A fresh browser session: headless, no network chatter, its own profile folder.
async fn browser(
    driver: &Driver,
    profile: &std::path::Path,
    dark: bool,
    javascript: bool,
) -> Client {
    browser_with(driver, profile, dark, javascript, &[]).await
}

/// [`browser`] with more of Chromium's switches.
async fn browser_with(
    driver: &Driver,
    profile: &std::path::Path,
    dark: bool,
    javascript: bool,
    extra: &[&str],
) -> Client {
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-dev-shm-usage".into(),
        "--window-size=1280,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    if dark {
        args.push("--force-dark-mode".into());
    }
    if !javascript {
        args.push("--blink-settings=scriptEnabled=false".into());
    }
    let mut options = json!({ "binary": chromium(), "args": args });
    if !javascript {
        options["prefs"] = json!({ "profile.managed_default_content_settings.javascript": 2 });
    }
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert("goog:chromeOptions".into(), options);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url())
        .await
        .unwrap_or_else(|err| panic!("Chromium did not start through chromedriver: {err}"))
}

/// Serves the compiled-in site under `/docs/` on a free port of 127.0.0.1.
async fn serve_site() -> SocketAddr {
    async fn file(path: &str) -> Response {
        match fleetwire::reference_site::get(path) {
            Some(f) => ([(header::CONTENT_TYPE, f.content_type)], f.bytes).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let app = Router::new()
        .route("/docs", get(|| async { Redirect::permanent("/docs/") }))
        .route("/docs/", get(|| file("")))
        .route(
            "/docs/{*path}",
            get(|Path(path): Path<String>| async move { file(&path).await }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

fn artifacts() -> PathBuf {
    let dir = workspace().join("target").join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The anchors of every field the page of `root` must list, read from the embedded bundle:
/// each property of each definition the document reaches.
fn expected_field_anchors(root: &str) -> BTreeSet<String> {
    let bundle: Value = serde_json::from_str(fleetwire_types::BUNDLE_SCHEMA).unwrap();
    let defs = bundle["$defs"].as_object().unwrap();
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("$ref", Value::String(r)) => {
                            out.push(r.rsplit('/').next().unwrap().into())
                        }
                        _ => refs(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    fn fields(base: &str, schema: &Value, out: &mut BTreeSet<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                let anchor = format!("{base}.{name}");
                out.insert(anchor.clone());
                let inner = prop.get("items").unwrap_or(prop);
                fields(&anchor, inner, out);
            }
        }
        for member in schema
            .get("oneOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(title) = member.get("title").and_then(Value::as_str) {
                fields(&format!("{base}.{title}"), member, out);
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    let mut out = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            fields(&name, &defs[&name], &mut out);
            refs(&defs[&name], &mut todo);
        }
    }
    out
}

async fn js(client: &Client, script: &str) -> Value {
    client
        .execute(script, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("script `{script}`: {e}"))
}

/// How far the open page sticks out sideways (`excess`, 0 when nothing does) at the window's
/// `width`, and the widest offenders (`wide`), innermost first.
async fn overflow(client: &Client) -> Value {
    js(
        client,
        r#"const width = document.documentElement.clientWidth;
           const wide = [...document.querySelectorAll('body *')]
             .filter(e => e.getBoundingClientRect().right > width + 1)
             .filter(e => ![...e.children].some(c => c.getBoundingClientRect().right > width + 1))
             .slice(0, 5)
             .map(e => e.tagName + '#' + e.id + '.' + e.className + ' right=' + e.getBoundingClientRect().right);
           return { width: innerWidth, excess: document.documentElement.scrollWidth - width, wide };"#,
    )
    .await
}

/// Where the page landed: the id of its `:target` and its path.
async fn landed(client: &Client) -> Value {
    js(
        client,
        "return { id: document.querySelector(':target')?.id, path: location.pathname }",
    )
    .await
}

/// Index → document page → deep link → search, with JavaScript on.
async fn browse_with_javascript(client: &Client, base: &str) {
    client.goto(&format!("{base}/docs")).await.unwrap();
    assert!(client
        .current_url()
        .await
        .unwrap()
        .as_str()
        .ends_with("/docs/"));
    let title = js(client, "return document.title").await;
    assert_eq!(title, "fleetwire reference · fleetwire reference");

    // The index links every document; follow one.
    let link = client
        .find(Locator::Css("a.doc-name[href='HostReportedState.html']"))
        .await
        .expect("the index links HostReportedState");
    link.click().await.unwrap();
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("section#HostReportedState"))
        .await
        .expect("the HostReportedState page opens");
    assert_eq!(
        client
            .find(Locator::Css("h1"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "HostReportedState"
    );
    // Nothing may stick out sideways; name the widest offenders if something does.
    let overflow = overflow(client).await;
    assert_eq!(
        overflow["excess"],
        json!(0),
        "the page scrolls sideways at 1280 px: {overflow}"
    );
    std::fs::write(
        artifacts().join("site-document-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();

    // The page states the unknown-field policy for reported.json, visibly, and its link to the
    // general statement lands on the index's section.
    let policy = js(
        client,
        r#"const s = document.querySelector('section#unknown-fields');
           const r = s.getBoundingClientRect();
           return { text: s.innerText, visible: r.height > 0 && getComputedStyle(s).display !== 'none' };"#,
    )
    .await;
    let text = policy["text"].as_str().unwrap();
    assert_eq!(policy["visible"], json!(true), "{policy}");
    for words in [
        "nibrunner",
        "set aside and reported",
        "--strict",
        "never carries",
    ] {
        assert!(text.contains(words), "{words:?} in {text}");
    }
    client
        .find(Locator::Css("p.extra a[href='index.html#unknown-fields']"))
        .await
        .expect("a closed object links the policy")
        .click()
        .await
        .unwrap();
    let landed = landed(client).await;
    assert_eq!(landed["id"], "unknown-fields", "{landed}");
    client
        .goto(&format!("{base}/docs/HostReportedState.html"))
        .await
        .unwrap();

    // A deep link by data path lands on the field's row, highlighted and on screen.
    client
        .goto(&format!(
            "{base}/docs/HostReportedState.html#ReportedInstance.meters.cpuMs"
        ))
        .await
        .unwrap();
    let target = js(
        client,
        r#"const t = document.querySelector(':target');
           const row = t && t.closest('tr');
           const r = row.getBoundingClientRect();
           return { target: t.id, row: row.id, top: r.top, bottom: r.bottom, height: innerHeight,
                    highlighted: getComputedStyle(row.querySelector('td')).backgroundColor };"#,
    )
    .await;
    assert_eq!(target["target"], "ReportedInstance.meters.cpuMs");
    assert_eq!(target["row"], "UsageMeters.cpuMs");
    let (top, bottom, height) = (
        target["top"].as_f64().unwrap(),
        target["bottom"].as_f64().unwrap(),
        target["height"].as_f64().unwrap(),
    );
    assert!(
        top >= 0.0 && bottom <= height,
        "the targeted row is off screen: {target}"
    );
    assert_ne!(
        target["highlighted"], "rgba(0, 0, 0, 0)",
        "the targeted row is not highlighted"
    );
    std::fs::write(
        artifacts().join("site-deep-link-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();

    // Search: type into the box, see results, follow the first.
    let input = client.find(Locator::Css("#search-input")).await.unwrap();
    assert!(
        input.is_displayed().await.unwrap(),
        "the search box is hidden with JavaScript on"
    );
    input.send_keys("restart budget").await.unwrap();
    let first = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#search-results li[data-hit] a"))
        .await
        .expect("the search shows results");
    let results = client
        .find_all(Locator::Css("#search-results li[data-hit]"))
        .await
        .unwrap();
    assert!(!results.is_empty());
    let first_text = first.text().await.unwrap();
    assert!(first_text.contains("budget"), "first result: {first_text}");
    std::fs::write(
        artifacts().join("site-search-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();
    first.click().await.unwrap();
    let landed = js(
        client,
        "const t = document.querySelector(':target'); return t ? t.id : null",
    )
    .await;
    assert_eq!(
        landed, "ReportedRestart.budget",
        "the first result leads to the field"
    );
}

/// Types `query` into the search box of the open page and returns every hit as the page shows
/// it: its link, whether it is on this page, its name, matched path, page and type.
async fn search_hits(client: &Client, query: &str) -> Vec<Value> {
    js(
        client,
        "const i = document.getElementById('search-input'); i.value = ''; i.focus(); return null",
    )
    .await;
    let input = client.find(Locator::Css("#search-input")).await.unwrap();
    input.send_keys(query).await.unwrap();
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#search-results li[data-hit] a"))
        .await
        .unwrap_or_else(|_| panic!("no hit for {query:?}"));
    let hits = js(
        client,
        r#"return [...document.querySelectorAll('#search-results li[data-hit]')].map(li => {
             const t = s => li.querySelector(s)?.textContent ?? null;
             return { href: li.querySelector('a').getAttribute('href'), here: li.hasAttribute('data-here'),
                      name: t('.r-name'), path: t('.r-path'), page: t('.r-page'), type: t('.r-type') };
           })"#,
    )
    .await;
    hits.as_array().cloned().unwrap_or_default()
}

/// Search by dotted path and by JSON pointer, with each hit's page and type shown, and hits on
/// the current page first.
async fn search_by_path_and_page(client: &Client, base: &str) {
    client
        .goto(&format!("{base}/docs/HostReportedState.html"))
        .await
        .unwrap();
    for query in ["/instances/0/meters/cpuMs", "instances.meters.cpuMs"] {
        let hits = search_hits(client, query).await;
        let first = &hits[0];
        assert_eq!(first["name"], "UsageMeters.cpuMs", "{query}: {hits:?}");
        assert_eq!(
            first["path"], "HostReportedState.instances.meters.cpuMs",
            "{query}: {first}"
        );
        assert_eq!(first["href"], "#UsageMeters.cpuMs", "{query}: {first}");
        assert_eq!(first["here"], json!(true), "{query}: {first}");
        assert!(
            first["page"]
                .as_str()
                .unwrap()
                .contains("HostReportedState"),
            "{query}: {first}"
        );
        assert_eq!(first["type"], "integer (uint64)", "{query}: {first}");
    }
    std::fs::write(
        artifacts().join("site-search-pointer-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();
    // Enter follows the first hit, on this page.
    client
        .find(Locator::Css("#search-input"))
        .await
        .unwrap()
        .send_keys("\u{E007}")
        .await
        .unwrap();
    let landed = landed(client).await;
    assert_eq!(landed["id"], "UsageMeters.cpuMs", "{landed}");
    assert!(
        landed["path"]
            .as_str()
            .unwrap()
            .ends_with("/HostReportedState.html"),
        "{landed}"
    );
    // The same word from a page that does not show the field leads to its home page; from one
    // that does, to its row there.
    client.goto(&format!("{base}/docs/")).await.unwrap();
    let hits = search_hits(client, "cpuMs").await;
    let first = &hits[0];
    assert_eq!(first["name"], "UsageMeters.cpuMs", "{hits:?}");
    assert_eq!(first["here"], json!(false), "{first}");
    let href = first["href"].as_str().unwrap();
    assert!(href.ends_with(".html#UsageMeters.cpuMs"), "{first}");
    assert!(
        first["page"]
            .as_str()
            .is_some_and(|p| href.starts_with(&format!("{p}.html"))),
        "the hit names the page it leads to: {first}"
    );
    client
        .goto(&format!("{base}/docs/HostReportedState.html"))
        .await
        .unwrap();
    let hits = search_hits(client, "cpuMs").await;
    assert_eq!(hits[0]["href"], "#UsageMeters.cpuMs", "{hits:?}");
    assert_eq!(hits[0]["here"], json!(true), "{hits:?}");
    // A pointer that names nothing says so.
    js(
        client,
        "const i = document.getElementById('search-input'); i.value = '/nowhere/0/at-all'; i.dispatchEvent(new Event('input')); return null",
    )
    .await;
    let none = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#search-results li.r-none"))
        .await
        .expect("a pointer to nothing has no hit");
    assert!(none.text().await.unwrap().contains("Nothing matches"));

    // An operation of the API page: its curl line, body fields and examples, for the eye.
    client
        .goto(&format!("{base}/docs/api.html#create_vm"))
        .await
        .unwrap();
    let curl = js(
        client,
        "return document.querySelector('#create_vm pre.curl').innerText",
    )
    .await;
    assert!(
        curl.as_str().unwrap().contains("-H @operator-header"),
        "{curl}"
    );
    std::fs::write(
        artifacts().join("site-api-operation-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();
}

/// The published folder opened straight from disk: links and search work from `file://`.
async fn browse_from_disk(client: &Client, folder: &std::path::Path) {
    for file in fleetwire::reference_site::FILES {
        let path = folder.join(file.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, file.bytes).unwrap();
    }
    client
        .goto(&format!("file://{}", folder.join("api.html").display()))
        .await
        .unwrap();
    let input = client.find(Locator::Css("#search-input")).await.unwrap();
    input.send_keys("heartbeat").await.unwrap();
    let first = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#search-results li[data-hit] a"))
        .await
        .expect("search works from file://");
    assert!(first
        .text()
        .await
        .unwrap()
        .to_lowercase()
        .contains("heartbeat"));
    first.click().await.unwrap();
    let url = client.current_url().await.unwrap();
    assert_eq!(url.scheme(), "file");
    assert!(
        url.fragment().is_some(),
        "the result links an anchor: {url}"
    );
}

/// The site as a real controller serves it (mTLS, its own CA): the API page's curl lines name
/// the origin the page is read from and the controller's CA file, and at 400 px nothing of
/// the page sticks out sideways.
async fn served_by_a_controller(client: &Client, controller: &ControllerProcess) {
    let origin = controller.url("");
    client
        .goto(&format!("{origin}/docs/api.html#create_vm"))
        .await
        .unwrap();
    let served = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("[data-curl-served]"))
        .await
        .expect("the curl lines are rewritten for the serving controller");
    assert_eq!(
        served.attr("data-curl-served").await.unwrap().as_deref(),
        Some(origin.as_str())
    );
    let curl = js(
        client,
        "return document.querySelector('#create_vm pre.curl').innerText",
    )
    .await;
    let curl = curl.as_str().unwrap();
    assert!(
        curl.contains(&format!("\"{origin}/v1/vms")),
        "the curl line does not call the serving controller {origin}: {curl}"
    );
    assert!(
        curl.contains(&format!("--cacert {}", controller.ca_path().display()))
            && !curl.contains("127.0.0.1:9203"),
        "the curl line does not name the controller's CA file: {curl}"
    );
    // The line's layout is kept: the trust options, the call, the URL, one group a line.
    assert_eq!(curl.lines().count(), 3, "{curl}");

    client.set_window_size(400, 800).await.unwrap();
    for page in [
        "api.html",
        "HostReportedState.html",
        "index.html",
        "changelog.html",
    ] {
        client.goto(&format!("{origin}/docs/{page}")).await.unwrap();
        let overflow = overflow(client).await;
        assert!(
            overflow["width"].as_f64().unwrap() <= 400.0,
            "the window did not shrink: {overflow}"
        );
        assert_eq!(
            overflow["excess"],
            json!(0),
            "{page} scrolls sideways at 400 px: {overflow}"
        );
    }
    std::fs::write(
        artifacts().join("site-api-400px-light.png"),
        client.screenshot().await.unwrap(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_in_headless_chromium() {
    let install = "apt-get install -y chromium chromium-driver (Debian), then run this test again";
    let chromedriver =
        std::env::var("FLEETWIRE_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    if !have_program(&chromedriver, install) || !have_program(&chromium(), install) {
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, async {
        let addr = serve_site().await;
        let base = format!("http://{addr}");
        let driver = Driver::start();
        let profiles = tempfile::tempdir().unwrap();

        // Light, with JavaScript.
        let client = browser(&driver, &profiles.path().join("light"), false, true).await;
        let outcome = tokio::spawn({
            let client = client.clone();
            let base = base.clone();
            async move {
                browse_with_javascript(&client, &base).await;
                search_by_path_and_page(&client, &base).await;
            }
        })
        .await;
        let outcome = match outcome {
            Ok(()) => {
                tokio::spawn({
                    let client = client.clone();
                    let folder = profiles.path().join("published");
                    async move { browse_from_disk(&client, &folder).await }
                })
                .await
            }
            failed => failed,
        };
        let _ = client.close().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic.into_panic());
        }

        // Served by a real controller, over HTTPS with its own CA (which this browser is
        // told to accept: it has no way to be given the fleet CA alone).
        let controller = tokio::task::spawn_blocking(|| ControllerProcess::start_secure(&[]))
            .await
            .unwrap();
        let client = browser_with(
            &driver,
            &profiles.path().join("served"),
            false,
            true,
            &["--ignore-certificate-errors"],
        )
        .await;
        let outcome = tokio::spawn({
            let client = client.clone();
            async move { served_by_a_controller(&client, &controller).await }
        })
        .await;
        let _ = client.close().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic.into_panic());
        }

        // Dark: the same page follows prefers-color-scheme.
        let client = browser(&driver, &profiles.path().join("dark"), true, true).await;
        client.goto(&format!("{base}/docs/HostReportedState.html")).await.unwrap();
        let background = js(&client, "return getComputedStyle(document.body).backgroundColor").await;
        std::fs::write(artifacts().join("site-document-dark.png"), client.screenshot().await.unwrap()).unwrap();
        client.goto(&format!("{base}/docs/api.html")).await.unwrap();
        std::fs::write(artifacts().join("site-api-dark.png"), client.screenshot().await.unwrap()).unwrap();
        // A phone: one column, nothing sticking out sideways.
        client.set_window_size(390, 844).await.unwrap();
        client.goto(&format!("{base}/docs/HostReportedState.html#ReportedInstance")).await.unwrap();
        let phone = js(
            &client,
            "return { width: innerWidth, excess: document.documentElement.scrollWidth - document.documentElement.clientWidth }",
        )
        .await;
        std::fs::write(artifacts().join("site-document-phone-dark.png"), client.screenshot().await.unwrap()).unwrap();
        assert!(phone["width"].as_f64().unwrap() < 500.0, "the window did not shrink: {phone}");
        assert_eq!(phone["excess"], json!(0), "the page scrolls sideways on a phone: {phone}");
        let _ = client.close().await;
        assert_eq!(background, "rgb(15, 18, 22)", "the dark theme did not apply");

        // Without JavaScript: every field is on the page and shown; the search box stays hidden.
        let client = browser(&driver, &profiles.path().join("nojs"), false, false).await;
        client.goto(&format!("{base}/docs/HostReportedState.html")).await.unwrap();
        let search = client.find(Locator::Css("#search")).await.unwrap();
        assert!(
            !search.is_displayed().await.unwrap(),
            "the search box is shown, so JavaScript ran"
        );
        let rows = client.find_all(Locator::Css("tr.field")).await.unwrap();
        let mut shown = BTreeSet::new();
        for row in &rows {
            let id = row.attr("id").await.unwrap().unwrap_or_default();
            if row.is_displayed().await.unwrap() {
                shown.insert(id);
            }
        }
        std::fs::write(artifacts().join("site-document-nojs.png"), client.screenshot().await.unwrap()).unwrap();
        let _ = client.close().await;
        let expected = expected_field_anchors("HostReportedState");
        let missing: Vec<&String> = expected.difference(&shown).collect();
        assert!(expected.len() > 50, "only {} fields expected", expected.len());
        assert!(missing.is_empty(), "fields not shown without JavaScript: {missing:?}");
        drop(driver);
    })
    .await
    .expect("the browser test took longer than two minutes");
}
