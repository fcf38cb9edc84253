//! `GET /`: the page for people. One static file embedded in the binary (no build step); it
//! reads the same API as any tool, with the credentials the browser sent for the page.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, X_FRAME_OPTIONS};
use axum::response::IntoResponse;

use super::auth::{Authed, MANAGEMENT};

const PAGE: &str = include_str!("page.html");

/// The page; asking for credentials (basic auth) like every API path, so that the browser
/// sends them with the page's own requests too.
pub(crate) async fn index(_user: Authed<MANAGEMENT>) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
            (X_FRAME_OPTIONS, "DENY"),
        ],
        PAGE,
    )
}
