//! AMQP field tables and message properties as JSON, the way RabbitMQ's management API maps
//! them: JSON integers become signed 64-bit (`long`), other numbers doubles, strings long
//! strings, objects tables, arrays arrays, `null` void.

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, FieldTable, FieldValue, ShortStr};
use serde_json::{Map, Number, Value};

use super::error::{ApiError, ApiResult};

/// Nesting deeper than this is refused (a request must not exhaust the stack).
const MAX_DEPTH: usize = 32;

/// A field value as JSON.
pub(crate) fn value_to_json(value: &FieldValue) -> Value {
    match value {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(v) => Value::from(*v),
        FieldValue::U8(v) => Value::from(*v),
        FieldValue::I16(v) => Value::from(*v),
        FieldValue::U16(v) => Value::from(*v),
        FieldValue::I32(v) => Value::from(*v),
        FieldValue::U32(v) => Value::from(*v),
        FieldValue::I64(v) => Value::from(*v),
        FieldValue::Timestamp(v) => Value::from(*v),
        FieldValue::F32(v) => float(f64::from(*v)),
        FieldValue::F64(v) => float(*v),
        FieldValue::Decimal { scale, value } => {
            float(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => {
            Value::String(String::from_utf8_lossy(b).into_owned())
        }
        FieldValue::Array(items) => Value::Array(items.iter().map(value_to_json).collect()),
        FieldValue::Table(t) => table_to_json(t),
        FieldValue::Void => Value::Null,
    }
}

fn float(v: f64) -> Value {
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// A field table as a JSON object.
pub(crate) fn table_to_json(table: &FieldTable) -> Value {
    Value::Object(
        table
            .iter()
            .map(|(k, v)| (k.to_string(), value_to_json(v)))
            .collect(),
    )
}

/// A JSON value as a field value.
fn json_to_value(value: &Value, depth: usize) -> ApiResult<FieldValue> {
    if depth > MAX_DEPTH {
        return Err(ApiError::bad_request("arguments nest too deeply"));
    }
    Ok(match value {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => FieldValue::LongStr(Bytes::from(s.clone())),
        Value::Array(items) => FieldValue::Array(
            items
                .iter()
                .map(|v| json_to_value(v, depth + 1))
                .collect::<ApiResult<_>>()?,
        ),
        Value::Object(map) => FieldValue::Table(object_to_table(map, depth + 1)?),
    })
}

fn object_to_table(map: &Map<String, Value>, depth: usize) -> ApiResult<FieldTable> {
    let mut table = FieldTable::new();
    for (key, value) in map {
        table.insert(short(key, "argument name")?, json_to_value(value, depth)?);
    }
    Ok(table)
}

/// An `arguments` (or `headers`) member: absent or `null` is empty; it must be an object.
pub(crate) fn json_to_table(value: Option<&Value>) -> ApiResult<FieldTable> {
    match value {
        None | Some(Value::Null) => Ok(FieldTable::new()),
        Some(Value::Object(map)) => object_to_table(map, 0),
        Some(_) => Err(ApiError::bad_request("arguments must be a JSON object")),
    }
}

/// A short string (at most 255 octets), or a 400 naming `what`.
pub(crate) fn short(text: &str, what: &str) -> ApiResult<ShortStr> {
    if text.len() > 255 {
        return Err(ApiError::bad_request(format!(
            "{what} is longer than 255 bytes"
        )));
    }
    Ok(ShortStr::from(text))
}

/// Message properties as RabbitMQ shows them: only those that are set.
pub(crate) fn properties_to_json(p: &BasicProperties) -> Value {
    let mut out = Map::new();
    let mut text = |name: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            out.insert(name.into(), Value::String(v.to_string()));
        }
    };
    text("content_type", &p.content_type);
    text("content_encoding", &p.content_encoding);
    text("correlation_id", &p.correlation_id);
    text("reply_to", &p.reply_to);
    text("expiration", &p.expiration);
    text("message_id", &p.message_id);
    text("type", &p.kind);
    text("user_id", &p.user_id);
    text("app_id", &p.app_id);
    text("cluster_id", &p.cluster_id);
    if let Some(h) = &p.headers {
        out.insert("headers".into(), table_to_json(h));
    }
    if let Some(v) = p.delivery_mode {
        out.insert("delivery_mode".into(), v.into());
    }
    if let Some(v) = p.priority {
        out.insert("priority".into(), v.into());
    }
    if let Some(v) = p.timestamp {
        out.insert("timestamp".into(), v.into());
    }
    Value::Object(out)
}

/// Message properties from a publish request's `properties` object.
pub(crate) fn json_to_properties(value: Option<&Value>) -> ApiResult<BasicProperties> {
    let mut p = BasicProperties::default();
    let map = match value {
        None | Some(Value::Null) => return Ok(p),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(ApiError::bad_request("properties must be a JSON object")),
    };
    for (key, value) in map {
        let text = || match value {
            Value::String(s) => short(s, key).map(Some),
            _ => Err(ApiError::bad_request(format!(
                "property {key} must be a string"
            ))),
        };
        let octet = || {
            value
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| ApiError::bad_request(format!("property {key} must be 0-255")))
        };
        match key.as_str() {
            "content_type" => p.content_type = text()?,
            "content_encoding" => p.content_encoding = text()?,
            "correlation_id" => p.correlation_id = text()?,
            "reply_to" => p.reply_to = text()?,
            "expiration" => p.expiration = text()?,
            "message_id" => p.message_id = text()?,
            "type" => p.kind = text()?,
            "user_id" => p.user_id = text()?,
            "app_id" => p.app_id = text()?,
            "cluster_id" => p.cluster_id = text()?,
            "delivery_mode" => p.delivery_mode = octet()?,
            "priority" => p.priority = octet()?,
            "timestamp" => {
                p.timestamp = Some(value.as_u64().ok_or_else(|| {
                    ApiError::bad_request("property timestamp must be seconds since the epoch")
                })?)
            }
            "headers" => p.headers = Some(json_to_table(Some(value))?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown message property '{other}'"
                )))
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_round_trip_through_json() {
        let json = json!({"x-max-priority": 10, "x-ratio": 0.5, "name": "a", "on": true,
                          "list": [1, "b"], "nested": {"k": null}});
        let table = json_to_table(Some(&json)).unwrap();
        assert_eq!(table.get("x-max-priority"), Some(&FieldValue::I64(10)));
        assert_eq!(table_to_json(&table), json);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(json_to_table(Some(&json!([1]))).is_err());
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!({ "a": deep });
        }
        assert!(json_to_table(Some(&deep)).is_err());
        assert!(json_to_properties(Some(&json!({"priority": 300}))).is_err());
        assert!(json_to_properties(Some(&json!({"colour": "red"}))).is_err());
    }

    #[test]
    fn properties_round_trip_through_json() {
        let json = json!({"delivery_mode": 2, "content_type": "text/plain",
                          "headers": {"x-delay": 5000}, "type": "t", "timestamp": 7});
        let p = json_to_properties(Some(&json)).unwrap();
        assert_eq!(p.kind.as_deref(), Some("t"));
        assert_eq!(properties_to_json(&p), json);
    }
}
