//! A keep-alive HTTP/1.1 client that sends what a tab of a served app sends
//! (its own `Host`, same-origin `Origin` and `Sec-Fetch-Site`, the session
//! cookie). Shared by the end-to-end tests and the benchmarks.

#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context as _, ensure};

/// A response of [`Http`].
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A keep-alive HTTP/1.1 client of one server, as a browser tab of it would
/// send: its own `Host`, same-origin `Origin` and `Sec-Fetch-Site`, the cookie.
pub struct Http {
    port: u16,
    conn: Option<BufReader<TcpStream>>,
    pub cookie: Option<String>,
}

impl Http {
    pub fn new(port: u16) -> Http {
        Http { port, conn: None, cookie: None }
    }

    /// A client of the server a launch address names, holding the session
    /// the address was exchanged for.
    pub fn launch(url: &str) -> anyhow::Result<Http> {
        let rest = url.strip_prefix("http://127.0.0.1:").context("a loopback launch address")?;
        let (port, path) = rest.split_once('/').context("a path")?;
        let mut h = Http::new(port.parse()?);
        let r = h.request("GET", &format!("/{path}"), None)?;
        ensure!(r.status == 303 || r.status == 302 || r.status == 307, "the launch address answered {}", r.status);
        let set = r.header("set-cookie").context("no session cookie")?;
        h.cookie = Some(set.split(';').next().unwrap_or_default().to_string());
        Ok(h)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends a request and reads its answer. A request sent on a kept
    /// connection that the server closed before it answered (it let its
    /// idle connections go: a worker retired) is sent again once, on a new
    /// connection — as browsers do.
    pub fn request(&mut self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Response> {
        let reused = self.conn.is_some();
        match self.request_once(method, path, body) {
            Err(e) if reused && unanswered(&e) => self.request_once(method, path, body),
            answer => answer,
        }
    }

    fn request_once(&mut self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Response> {
        if self.conn.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(120)))?;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut().expect("connected");
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", self.port);
        if method != "GET" {
            req.push_str(&format!("Origin: http://127.0.0.1:{}\r\nSec-Fetch-Site: same-origin\r\n", self.port));
        }
        if let Some(c) = &self.cookie {
            req.push_str(&format!("Cookie: {c}\r\n"));
        }
        let body = body.unwrap_or("");
        if method != "GET" {
            req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let sent = conn.get_mut().write_all(req.as_bytes());
        let answer = sent.map_err(anyhow::Error::from).and_then(|()| read_response(conn));
        if answer.is_err() {
            self.conn = None;
        }
        answer
    }
}

/// Whether `e` says the server closed the connection without a byte of
/// an answer (its end, or a reset).
fn unanswered(e: &anyhow::Error) -> bool {
    e.to_string() == CLOSED
        || e.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            )
        })
}

const CLOSED: &str = "the server closed the connection";

fn read_response(conn: &mut BufReader<TcpStream>) -> anyhow::Result<Response> {
    let mut line = String::new();
    ensure!(conn.read_line(&mut line)? > 0, CLOSED);
    let status: u16 = line.split_whitespace().nth(1).context("a status line")?.parse()?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse())
        .transpose()?
        .context("a response without Content-Length")?;
    let mut body = vec![0; len];
    conn.read_exact(&mut body)?;
    Ok(Response { status, headers, body })
}
