//! A hostile guest: each route tries to get around one rule of the host and
//! answers with exactly what the host told it, so a test can assert the denial.

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::log::{self, Level};
use autoapp::app::spawn;
use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;
use serde_json::{Value as Json, json};

/// What `memory.leftover` leaves behind in its instance's static data.
static LEFTOVER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How much heap `memory.leftover` dirties: more than the host keeps resident
/// per instance (2 MiB), so both ways of resetting memory are crossed.
const LEFTOVER_HEAP: usize = 6 << 20;

struct Hostile;
export!(Hostile);

fn describe(e: &AppError) -> String {
    match e {
        AppError::InvalidInput(m) => format!("invalid-input: {m}"),
        AppError::NotFound(m) => format!("not-found: {m}"),
        AppError::Conflict(m) => format!("conflict: {m}"),
        AppError::Denied(m) => format!("denied: {m}"),
        AppError::Internal(m) => format!("internal: {m}"),
    }
}

fn mark(note: &str) -> Result<(), AppError> {
    store::execute(
        "INSERT INTO marks (note) VALUES (?1)",
        &[Value::Text(note.into())],
    )?;
    Ok(())
}

fn run_sql(sql: &str) -> Json {
    match store::execute(sql, &[]) {
        Ok(n) => json!({ "ok": n }),
        Err(e) => json!({ "error": describe(&e) }),
    }
}

#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(n: u64, buf: &mut [u8; 256]) -> u64 {
    buf[(n % 256) as usize] = n as u8;
    let mut next = [0u8; 256];
    next.copy_from_slice(buf);
    recurse(n + 1, &mut next).wrapping_add(next[0] as u64)
}

impl exports::autoapp::app::routes::Guest for Hostile {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let input: Json =
            serde_json::from_str(&input).map_err(|e| AppError::InvalidInput(e.to_string()))?;
        let answer = match route.as_str() {
            "count" => {
                let rows = store::query("SELECT count(*) FROM marks", &[])?;
                match rows.rows[0][0] {
                    Value::Integer(n) => json!({ "marks": n }),
                    _ => json!({ "marks": null }),
                }
            }
            "mark" => {
                mark("normal")?;
                json!({ "ok": true })
            }
            "mark.then-spin" => {
                // Holds the app's write permit (its transaction is open) until
                // the host stops it at the deadline.
                mark("before the loop")?;
                let mut x: u64 = 0;
                loop {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            }
            "write.then-panic" => {
                mark("before the panic")?;
                panic!("the hostile guest panics after writing");
            }
            "write.then-error" => {
                mark("before the error")?;
                return Err(AppError::Conflict(
                    "the hostile guest fails after writing".into(),
                ));
            }
            "write.in-read" => {
                match store::execute("INSERT INTO marks (note) VALUES ('from a read')", &[]) {
                    Ok(n) => json!({ "ok": n }),
                    Err(e) => json!({ "error": describe(&e) }),
                }
            }
            "sql" | "sql.read" => run_sql(input["sql"].as_str().unwrap_or_default()),
            "spin" => {
                let mut x: u64 = 0;
                loop {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            }
            "log.secret" => {
                // An app that mishandles a key: logs it, prints it, fails with it.
                let key = "sk-test-FAKE0123456789abcdefXYZ";
                let token = "ghp_FAKE0123456789abcdefghijKLMNOP";
                log::write(Level::Warn, &format!("calling the feed with Authorization: Bearer {token} and {key}"));
                eprintln!("debug: key={key}");
                return Err(AppError::Internal(format!("the feed refused the key {key}")));
            }
            "memory.leftover" => {
                // What an earlier call of this instance slot left, if the host
                // did not put memory back: the static's value, and the first
                // non-zero byte of freshly allocated (zeroed) heap, which the
                // allocator takes straight from `memory.grow`.
                let before = LEFTOVER.swap(0x5ec2_e7ed, std::sync::atomic::Ordering::SeqCst);
                let mut heap = vec![0u8; LEFTOVER_HEAP];
                let dirty = heap.iter().position(|b| *b != 0);
                heap.fill(0xa5);
                std::hint::black_box(&heap);
                json!({ "static": before, "heap_dirty_at": dirty })
            }
            "memory.bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 16 << 20];
                    chunk[0] = hoard.len() as u8;
                    hoard.push(std::hint::black_box(chunk));
                }
            }
            "stack.overflow" => {
                let mut buf = [0u8; 256];
                json!({ "n": recurse(0, &mut buf) })
            }
            "answer.not-json" => return Ok("this is <b>not</b> JSON".into()),
            "answer.heavy" => {
                // A list of `values` zeros, or a string of `bytes` letters:
                // text the host would hold many times over parsed; or an
                // error of `error` letters.
                if let Some(n) = input["error"].as_u64() {
                    return Err(AppError::Internal("x".repeat(n as usize)));
                }
                let n = input["values"].as_u64().unwrap_or(0) as usize;
                let mut text = String::with_capacity(2 * n + 2);
                match input["bytes"].as_u64() {
                    Some(bytes) => {
                        text.push('"');
                        text.extend(std::iter::repeat_n('a', bytes as usize));
                        text.push('"');
                    }
                    None => {
                        text.push('[');
                        for i in 0..n {
                            text.push_str(if i == 0 { "0" } else { ",0" });
                        }
                        text.push(']');
                    }
                }
                return Ok(text);
            }
            "env.read" => {
                let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
                json!({ "vars": vars, "args": std::env::args().collect::<Vec<_>>() })
            }
            "fs.read" => {
                let path = input["path"].as_str().unwrap_or("/");
                match std::fs::read_dir(path) {
                    Ok(entries) => {
                        json!({ "entries": entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>() })
                    }
                    Err(dir_err) => match std::fs::read(path) {
                        Ok(bytes) => json!({ "bytes": bytes.len() }),
                        Err(e) => {
                            json!({ "error": e.to_string(), "dir_error": dir_err.to_string() })
                        }
                    },
                }
            }
            "socket.connect" => {
                let addr = input["addr"].as_str().unwrap_or("127.0.0.1:80");
                match std::net::TcpStream::connect(addr) {
                    Ok(_) => json!({ "connected": true }),
                    Err(e) => json!({ "error": e.to_string() }),
                }
            }
            "log.flood" => {
                for i in 0..5000 {
                    log::write(Level::Debug, &format!("line {i} {}", "x".repeat(10_000)));
                }
                for _ in 0..10_000 {
                    eprintln!("{}", "y".repeat(1000));
                }
                json!({ "ok": true })
            }
            "http.get" | "http.get-in-write" | "http.get-in-read" => {
                match http_get(input["url"].as_str().unwrap_or("")) {
                    Ok((status, body)) => json!({
                        "status": status,
                        "bytes": body.len(),
                        "body": String::from_utf8_lossy(&body[..body.len().min(2048)]),
                    }),
                    Err(e) => json!({ "error": e }),
                }
            }
            "http.send" => {
                let sent = http_send(&input);
                let body = sent["body"].as_str().unwrap_or("").to_string();
                match input["then"].as_str().unwrap_or("") {
                    // What came back, everywhere an app can put words.
                    "log" => {
                        log::write(Level::Info, &format!("came back: {body} {}", sent["headers"]));
                        eprintln!("came back: {body}");
                    }
                    "store" => mark(&format!("came back: {body} {}", sent["headers"]))?,
                    "error" => return Err(AppError::Internal(format!("came back: {body}"))),
                    _ => {}
                }
                sent
            }
            "spawn.run" | "spawn.in-read" => {
                let args: Vec<String> = input["args"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let stdin = input["stdin"].as_str().unwrap_or("").as_bytes().to_vec();
                match spawn::run(input["program"].as_str().unwrap_or(""), &args, &stdin) {
                    Ok(out) => json!({
                        "status": out.status,
                        "stdout": String::from_utf8_lossy(&out.stdout),
                        "stderr": String::from_utf8_lossy(&out.stderr),
                    }),
                    Err(e) => json!({ "error": describe(&e) }),
                }
            }
            "files.read" => {
                let path = input["path"].as_str().unwrap_or("/");
                match std::fs::read_dir(path) {
                    Ok(entries) => {
                        let mut names: Vec<String> = entries
                            .filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect();
                        names.sort();
                        json!({ "entries": names })
                    }
                    Err(_) => match std::fs::read_to_string(path) {
                        Ok(text) => json!({ "text": text }),
                        Err(e) => json!({ "error": e.to_string() }),
                    },
                }
            }
            "files.write" => match std::fs::write(
                input["path"].as_str().unwrap_or(""),
                input["content"].as_str().unwrap_or(""),
            ) {
                Ok(()) => json!({ "ok": true }),
                Err(e) => json!({ "error": e.to_string() }),
            },
            "socket.connect-external" => {
                let addr = input["addr"].as_str().unwrap_or("127.0.0.1:80");
                match std::net::TcpStream::connect(addr) {
                    Ok(_) => json!({ "connected": true }),
                    Err(e) => json!({ "error": e.to_string() }),
                }
            }
            "spin.external" => loop {
                std::hint::black_box(0u64);
            },
            other => return Err(AppError::NotFound(format!("no route {other}"))),
        };
        Ok(answer.to_string())
    }
}

impl exports::autoapp::app::views::Guest for Hostile {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        match page.as_str() {
            "index" => Ok(json!({ "title": "Hostile", "children": [ { "type": "text", "text": "<script>alert(1)</script>" } ] }).to_string()),
            "spin" => loop {
                std::hint::black_box(0u64);
            },
            // A button with a key buttons do not have (`text`, as a link's).
            "misnamed" => Ok(json!({ "title": "Hostile", "children": [
                { "type": "button", "route": "count", "text": "Count" } ] })
            .to_string()),
            other => Err(AppError::NotFound(format!("no page {other}"))),
        }
    }
}

/// GET `url` through wasi:http; the error is the host's `error-code`, by name.
fn http_get(url: &str) -> Result<(u16, Vec<u8>), String> {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};
    use wasi::io::streams::StreamError;

    let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|_| "bad scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|_| "bad authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|_| "bad path")?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    let response = loop {
        if let Some(r) = pending.get() {
            break r;
        }
        pending.subscribe().block();
    };
    let response = response
        .map_err(|_| "the response was taken twice".to_string())?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let body = response.consume().map_err(|_| "no body")?;
    let stream = body.stream().map_err(|_| "no stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("body: {}", e.to_debug_string()));
            }
        }
    }
    Ok((status, bytes))
}

/// Sends the request `input` describes (`url`, `method`, `headers` as
/// `[[name, value]]`, `body`) through wasi:http and answers with everything
/// that came back — status, headers, body — and, with `read_back`, what the
/// request's own header handle holds after it was sent (a key the host put
/// there must not show).
fn http_send(input: &Json) -> Json {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
    use wasi::io::streams::StreamError;

    let url = input["url"].as_str().unwrap_or("");
    let Some((scheme, rest)) = url.split_once("://") else {
        return json!({ "error": "no scheme" });
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let fields = Fields::new();
    for h in input["headers"].as_array().into_iter().flatten() {
        let (Some(n), Some(v)) = (h[0].as_str(), h[1].as_str()) else { continue };
        if let Err(e) = fields.append(n, v.as_bytes()) {
            return json!({ "error": format!("header {n}: {e:?}") });
        }
    }
    let request = OutgoingRequest::new(fields);
    let method = if input["body"].is_string() { Method::Post } else { Method::Get };
    let _ = request.set_method(&method);
    let _ = request.set_scheme(Some(&if scheme == "https" { Scheme::Https } else { Scheme::Http }));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let own = request.headers();
    if let Some(text) = input["body"].as_str() {
        let body = request.body().expect("a request's body, once");
        {
            let out = body.write().expect("its stream, once");
            let _ = out.blocking_write_and_flush(text.as_bytes());
        }
        let _ = OutgoingBody::finish(body, None);
    }
    let pending = match outgoing_handler::handle(request, None) {
        Ok(p) => p,
        Err(e) => return json!({ "error": format!("{e:?}") }),
    };
    let read_back = |own: &Fields| -> Json {
        own.entries().into_iter().map(|(n, v)| json!([n, String::from_utf8_lossy(&v)])).collect()
    };
    let sent = if input["read_back"].as_bool() == Some(true) { read_back(&own) } else { json!(null) };
    let response = loop {
        if let Some(r) = pending.get() {
            break r;
        }
        pending.subscribe().block();
    };
    let response = match response {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return json!({ "error": format!("{e:?}"), "sent": sent }),
        Err(()) => return json!({ "error": "the response was taken twice" }),
    };
    let headers: Vec<Json> = response
        .headers()
        .entries()
        .into_iter()
        .map(|(n, v)| json!([n, String::from_utf8_lossy(&v)]))
        .collect();
    let status = response.status();
    let mut bytes = Vec::new();
    if let Ok(body) = response.consume() {
        if let Ok(stream) = body.stream() {
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return json!({ "error": format!("body: {}", e.to_debug_string()) });
                    }
                }
            }
        }
    }
    json!({
        "status": status,
        "headers": headers,
        "body": String::from_utf8_lossy(&bytes),
        // How many bytes came: what the app read, whatever its answer's
        // words become on their way out.
        "body_len": bytes.len(),
        "sent": sent,
        "sent_after": if input["read_back"].as_bool() == Some(true) { read_back(&own) } else { json!(null) },
    })
}
