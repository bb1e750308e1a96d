//! The pieces of etcd's JSON requests and answers: keys and values travel
//! as base64, 64-bit numbers as strings, and fields at their zero value
//! are left out of answers.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

pub(crate) fn encode(text: &str) -> String {
    STANDARD.encode(text)
}

pub(crate) fn decode(field: &Value) -> String {
    let bytes = STANDARD
        .decode(field.as_str().unwrap_or_default())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A number etcd sent as a string ("0" when left out).
pub(crate) fn number(field: &Value) -> i64 {
    match field {
        Value::String(text) => text.parse().unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

/// The revision an answer was read at (or a write made).
pub(crate) fn revision(answer: &Value) -> i64 {
    number(&answer["header"]["revision"])
}

/// The end of the range of every key under `prefix`: its last byte plus one.
pub(crate) fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.as_bytes().to_vec();
    let last = end.pop().expect("a prefix is never empty");
    end.push(last + 1);
    STANDARD.encode(end)
}

/// One key of a range answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) value: String,
    /// The lease the key rides on (0: none).
    pub(crate) lease: i64,
}

/// The keys of a range answer (or of a Txn's range response).
pub(crate) fn entries(range: &Value) -> Vec<Entry> {
    range["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| Entry {
                    key: decode(&kv["key"]),
                    create_revision: number(&kv["create_revision"]),
                    value: decode(&kv["value"]),
                    lease: number(&kv["lease"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The keys under `prefix` in creation order, oldest first.
pub(crate) fn oldest(prefix: &str, limit: i64) -> Value {
    json!({"request_range": {
        "key": encode(prefix),
        "range_end": prefix_end(prefix),
        "sort_order": "ASCEND",
        "sort_target": "CREATE",
        "limit": limit,
    }})
}

/// The newest key under `prefix` created before `revision`.
pub(crate) fn newest_before(prefix: &str, revision: i64) -> Value {
    json!({"request_range": {
        "key": encode(prefix),
        "range_end": prefix_end(prefix),
        "sort_order": "DESCEND",
        "sort_target": "CREATE",
        "max_create_revision": revision - 1,
        "limit": 1,
        "keys_only": true,
    }})
}

pub(crate) fn get(key: &str) -> Value {
    json!({"request_range": {"key": encode(key), "keys_only": true}})
}

/// The key with its value and lease.
pub(crate) fn read(key: &str) -> Value {
    json!({"request_range": {"key": encode(key)}})
}

/// The key's value is `value`.
pub(crate) fn valued(key: &str, value: &str) -> Value {
    json!({"key": encode(key), "target": "VALUE", "result": "EQUAL", "value": encode(value)})
}

/// No key in `[key, range_end)` (both already encoded): a range compare
/// holds for every key of the range, and for none when it is empty.
pub(crate) fn none_in(key: String, range_end: String) -> Value {
    json!({"key": key, "range_end": range_end, "target": "CREATE", "result": "EQUAL", "create_revision": 0})
}

/// The key's create revision is `revision` (0: the key does not exist).
pub(crate) fn created_at(key: &str, revision: i64) -> Value {
    json!({"key": encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": revision})
}

/// The key exists.
pub(crate) fn exists(key: &str) -> Value {
    json!({"key": encode(key), "target": "CREATE", "result": "GREATER", "create_revision": 0})
}

/// The `index`th response of a Txn answer, as a range answer.
pub(crate) fn response(answer: &Value, index: usize) -> &Value {
    &answer["responses"][index]["response_range"]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_after_its_last_byte() {
        assert_eq!(prefix_end("a/"), encode("a0"));
    }

    #[test]
    fn answers_leave_zero_fields_out() {
        let answer = json!({"header": {"revision": "7"}, "kvs": [{"key": encode("k"), "create_revision": "5"}]});
        assert_eq!(revision(&answer), 7);
        assert_eq!(
            entries(&answer),
            [Entry {
                key: "k".into(),
                create_revision: 5,
                value: String::new(),
                lease: 0
            }]
        );
        assert_eq!(revision(&json!({})), 0);
    }
}
