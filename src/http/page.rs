//! `GET /`: the page for people. One static file embedded in the binary (no build step); it
//! reads the same API as any tool.
//!
//! The page itself holds no data, so it is served without a login: it shows a login form and
//! sends the credentials from script (`Authorization` on each of its requests), as RabbitMQ's
//! UI does. Asking the browser for them instead (a 401 with `WWW-Authenticate`) would make it
//! cache them for the origin and attach them to requests other sites make to it.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::IntoResponse;

const PAGE: &str = include_str!("page.html");

/// The page: never framed by another site (clickjacking), never cached.
pub(crate) async fn index() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
            (X_FRAME_OPTIONS, "DENY"),
            (CONTENT_SECURITY_POLICY, "frame-ancestors 'none'"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
}
