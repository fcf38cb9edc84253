//! State-changing requests must say they carry JSON.
//!
//! A page on any site can make the browser send a `POST` whose body is `text/plain`,
//! `application/x-www-form-urlencoded` or `multipart/form-data` (an HTML form, or `fetch` in
//! `no-cors` mode) without asking this server first; any other content type, and any `PUT`,
//! `PATCH` or `DELETE`, needs a CORS preflight, which this server never grants. So a request
//! that changes state only counts when it says `Content-Type: application/json`: every `POST`
//! (even an empty one: `POST /test/reset` needs no body), and a `PUT`, `PATCH` or `DELETE`
//! that has a body. A bodiless `DELETE` or `PUT` stays as it is (curl's
//! `-X DELETE`, RabbitMQ's bodiless queue declaration): no browser sends one cross-site.

use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Answers 415 to a state-changing request that does not declare a JSON body.
pub(crate) async fn require_json(request: Request, next: Next) -> Response {
    let headers = request.headers();
    if needs_json(request.method(), headers) && !declares_json(headers) {
        return ApiError::unsupported_media_type().into_response();
    }
    next.run(request).await
}

/// `POST` always; `PUT`, `PATCH` and `DELETE` when they carry a body.
fn needs_json(method: &Method, headers: &HeaderMap) -> bool {
    match *method {
        Method::POST => true,
        Method::PUT | Method::PATCH | Method::DELETE => has_body(headers),
        _ => false,
    }
}

fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    // An unreadable length counts as a body: what a peer sends unclearly is not waved through.
    match length {
        Some(n) => n > 0,
        None => headers.contains_key(CONTENT_LENGTH) || headers.contains_key(TRANSFER_ENCODING),
    }
}

/// `application/json`, with any parameters (`; charset=utf-8`), in any case.
fn declares_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn every_post_and_every_body_needs_json() {
        assert!(needs_json(&Method::POST, &headers(&[])));
        assert!(needs_json(
            &Method::PUT,
            &headers(&[("content-length", "2")])
        ));
        assert!(needs_json(
            &Method::DELETE,
            &headers(&[("transfer-encoding", "chunked")])
        ));
        assert!(needs_json(
            &Method::PATCH,
            &headers(&[("content-length", "x")])
        ));
        assert!(!needs_json(&Method::DELETE, &headers(&[])));
        assert!(!needs_json(
            &Method::PUT,
            &headers(&[("content-length", "0")])
        ));
        assert!(!needs_json(
            &Method::GET,
            &headers(&[("content-length", "5")])
        ));
    }

    #[test]
    fn only_application_json_declares_json() {
        let json = |value: &'static str| declares_json(&headers(&[("content-type", value)]));
        assert!(json("application/json"));
        assert!(json("Application/JSON; charset=utf-8"));
        assert!(!json("text/plain"));
        assert!(!json("text/plain; application/json"));
        assert!(!json("application/x-www-form-urlencoded"));
        assert!(!json("multipart/form-data; boundary=x"));
        assert!(!json("application/jsonp"));
        assert!(!declares_json(&headers(&[])));
        let twice = headers(&[
            ("content-type", "application/json"),
            ("content-type", "text/plain"),
        ]);
        assert!(!declares_json(&twice));
    }
}
