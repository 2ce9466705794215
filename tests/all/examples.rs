//! The bundled examples that reach outside their store: news (the network)
//! and files (a folder), each reaching only what was granted.

use crate::support::{TestRoot, TestServer};

#[test]
fn news_fetches_only_from_what_was_granted() {
    let feed = TestServer::start();
    let elsewhere = TestServer::start();
    let root = TestRoot::new();
    root.install_with("news", &format!("network = [\"http://127.0.0.1:{}\"]", feed.port));
    let got =
        root.call("news", "headlines.refresh", &serde_json::json!({ "feed": feed.url("/front.json") }).to_string());
    assert_eq!(got["stored"], 2, "{got}");
    let list = root.call("news", "headlines.list", "{}");
    assert_eq!(list["headlines"][0]["title"], "Components everywhere");
    assert_eq!(list["headlines"][1]["points"], 80);

    let e = root.refused(&[
        "call",
        "news",
        "headlines.refresh",
        &serde_json::json!({ "feed": elsewhere.url("/front.json") }).to_string(),
    ]);
    assert!(e.contains(&format!("did not let News reach 127.0.0.1:{}", elsewhere.port)), "{e}");
    assert_eq!(elsewhere.hits(), 0, "no request reached the other server");
    // The default feed is a real internet origin that this release does not declare.
    let e = root.refused(&["call", "news", "headlines.refresh"]);
    assert!(e.contains("did not let News reach hn.algolia.com"), "{e}");
    assert_eq!(root.call("news", "headlines.list", "{}")["headlines"].as_array().unwrap().len(), 2);
}

#[test]
fn files_reads_the_granted_folder_and_nothing_beside_it() {
    let top = tempfile::tempdir().unwrap();
    let inbox = top.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("todo.txt"), "buy milk").unwrap();
    std::fs::write(top.path().join("private.txt"), "not for apps").unwrap();
    let root = TestRoot::new();
    root.install_with(
        "files",
        &format!("files = [{{ name = \"inbox\", path = \"{}\", access = \"read\" }}]", inbox.display()),
    );
    let list = root.call("files", "files.list", "{}");
    assert_eq!(list["files"], serde_json::json!([{ "name": "todo.txt", "bytes": 8 }]));
    assert_eq!(root.call("files", "files.read", r#"{"name":"todo.txt"}"#)["text"], "buy milk");
    let e = root.refused(&["call", "files", "files.read", r#"{"name":"../private.txt"}"#]);
    assert!(e.contains("not a path"), "{e}");
    let e = root.refused(&["call", "files", "files.read", r#"{"name":"private.txt"}"#]);
    assert!(e.contains("there is no file private.txt"), "{e}");
}
