//! Errors as the management API reports them: a status and `{"error": ..., "reason": ...}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use dwellmq_core::BrokerError;

/// A failed request, answered with RabbitMQ's status code and error body.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: &'static str,
    reason: String,
    /// Set on 401 without valid credentials for a tool that waits to be asked for them
    /// (never for a browser: see `auth::challenges`).
    challenge: bool,
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(status: StatusCode, error: &'static str, reason: impl Into<String>) -> Self {
        ApiError {
            status,
            error,
            reason: reason.into(),
            challenge: false,
        }
    }

    /// 404, with RabbitMQ's exact words.
    pub(crate) fn not_found() -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "Object Not Found", "Not Found")
    }

    /// 400: the request is malformed or asks for something impossible.
    pub(crate) fn bad_request(reason: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
    }

    /// 401: no or wrong credentials; with a `WWW-Authenticate` challenge when `challenge`.
    pub(crate) fn unauthenticated(reason: impl Into<String>, challenge: bool) -> Self {
        ApiError {
            challenge,
            ..ApiError::new(StatusCode::UNAUTHORIZED, "not_authorized", reason)
        }
    }

    /// 403: the request names a host this listener does not answer to (DNS rebinding).
    pub(crate) fn foreign_host(host: &str) -> Self {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this listener does not answer to the host '{host}' \
                 (add the name to http_allowed_hosts)"
            ),
        )
    }

    /// 415: a state-changing request whose body is not declared as JSON (what a form on
    /// another site could send).
    pub(crate) fn unsupported_media_type() -> Self {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "requests that change state must have Content-Type: application/json",
        )
    }

    /// The user is known but may not do this. RabbitMQ answers 401 `not_authorised` here too
    /// (`rabbit_mgmt_util:not_authorised/3`), not 403: tools written against it expect that.
    pub(crate) fn forbidden(reason: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "not_authorised", reason)
    }

    /// 405 for a path that exists with other methods.
    pub(crate) fn method_not_allowed() -> Self {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
            "this path does not accept that method",
        )
    }

    /// Any other status, for dwellmq's own endpoints (the test double's).
    pub(crate) fn status(
        status: StatusCode,
        error: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        ApiError::new(status, error, reason)
    }

    /// The readable part of the error.
    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// 500: the change is in effect, but the store could not write it (a deletion is retried
    /// until it is written; anything else a restart will not have).
    pub(crate) fn not_stored(why: impl std::fmt::Display) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_server_error",
            format!("the change could not be written to the store: {why}"),
        )
    }

    /// 503: the answer needs the store, which cannot be read now (it is reopening after a
    /// failed fsync); the same request later will be answered.
    pub(crate) fn unavailable(reason: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            reason,
        )
    }

    /// 413: the body is over the request size limit.
    pub(crate) fn too_large(limit: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are limited to {limit} bytes"),
        )
    }
}

impl From<BrokerError> for ApiError {
    /// What the broker's own refusal becomes over HTTP: not-found stays 404 (with the broker's
    /// text); everything else is a 400 whose reason carries the AMQP code and text, e.g.
    /// `406 PRECONDITION_FAILED - inequivalent arg ...`, as RabbitMQ's `bad_request_exception`
    /// words it.
    fn from(error: BrokerError) -> Self {
        match error {
            BrokerError::NotFound(text) => ApiError::new(StatusCode::NOT_FOUND, "not_found", text),
            other => ApiError::bad_request(format!("{} {other}", other.reply_code())),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.error, "reason": self.reason });
        let mut response = (self.status, Json(body)).into_response();
        if self.challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}
