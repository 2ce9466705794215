//! The peer of benchmark P2 (docs/performance.md): answers every request with
//! the same JSON as the bench app's `hello` route, as a `wasi:http` incoming
//! handler that `wasmtime serve` runs in a fresh instance per request.

use wasip2::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

wasip2::http::proxy::export!(Hello);

struct Hello;

const BODY: &[u8] = br#"{"hello":"world"}"#;

impl wasip2::exports::http::incoming_handler::Guest for Hello {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let headers = Fields::from_list(&[
            ("content-type".to_string(), b"application/json".to_vec()),
            ("content-length".to_string(), BODY.len().to_string().into_bytes()),
        ])
        .expect("valid headers");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("a body");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a stream");
        stream.blocking_write_and_flush(BODY).expect("written");
        drop(stream);
        OutgoingBody::finish(body, None).expect("finished");
    }
}
