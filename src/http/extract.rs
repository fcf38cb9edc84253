//! Request extractors that answer bad input with the API's error body instead of axum's
//! plain-text rejections.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::error::ApiError;
use super::MAX_BODY;

/// A JSON body. An empty body reads as `{}`, as RabbitMQ accepts a bodiless `PUT` of a queue.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(text)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(MAX_BODY)
    } else {
        ApiError::bad_request(rejection.body_text())
    }
}

/// Path segments, percent-decoded (`%2F` is the vhost `/`).
pub(crate) struct PathOf<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| PathOf(t))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// The query string.
pub(crate) struct QueryOf<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(t)| QueryOf(t))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// A boolean member that may also arrive as the string `"true"` or `"false"`: `rabbitmqadmin`
/// sends them so, and RabbitMQ accepts both.
pub(crate) fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Text(String),
    }
    match Flag::deserialize(d)? {
        Flag::Bool(b) => Ok(b),
        Flag::Text(t) if t == "true" => Ok(true),
        Flag::Text(t) if t == "false" => Ok(false),
        Flag::Text(t) => Err(serde::de::Error::custom(format!(
            "expected true or false, got '{t}'"
        ))),
    }
}

/// A count that may also arrive as a decimal string (`rabbitmqadmin get count=5`).
pub(crate) fn lenient_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Count {
        Number(usize),
        Text(String),
    }
    match Count::deserialize(d)? {
        Count::Number(n) => Ok(n),
        Count::Text(t) => t.trim().parse().map_err(|_| {
            serde::de::Error::custom(format!("expected a non-negative integer, got '{t}'"))
        }),
    }
}

/// The same, optional.
pub(crate) fn lenient_opt_count<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<usize>, D::Error> {
    lenient_count(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[serde(deserialize_with = "lenient_bool")]
        flag: bool,
        #[serde(deserialize_with = "lenient_count")]
        count: usize,
    }

    #[test]
    fn flags_and_counts_may_be_strings() {
        let b: Body = serde_json::from_str(r#"{"flag": "true", "count": "12"}"#).unwrap();
        assert!(b.flag);
        assert_eq!(b.count, 12);
        let b: Body = serde_json::from_str(r#"{"flag": false, "count": 3}"#).unwrap();
        assert!(!b.flag);
        assert!(serde_json::from_str::<Body>(r#"{"flag": "yes", "count": 1}"#).is_err());
        assert!(serde_json::from_str::<Body>(r#"{"flag": true, "count": "-1"}"#).is_err());
    }
}
