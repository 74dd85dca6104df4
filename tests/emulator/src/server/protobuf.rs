//! Decoding of Kubernetes protobuf request bodies for the few built-in
//! types kubectl sends that way (`kubectl create namespace|configmap|secret|
//! serviceaccount|token`, evictions from `kubectl drain`, the reviews of
//! `kubectl auth can-i|whoami`). Responses are always
//! JSON, which every client accepts. Other types answer 415 with a message
//! naming the type.

use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// How one protobuf field maps to JSON.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Int,
    Bool,
    Time,
    Message(&'static [Field]),
    TextMap,
    BytesMap,
    TextList,
    MessageList(&'static [Field]),
}

type Field = (u64, &'static str, Kind);

const OWNER_REFERENCE: &[Field] = &[
    (1, "kind", Kind::Text),
    (3, "name", Kind::Text),
    (4, "uid", Kind::Text),
    (5, "apiVersion", Kind::Text),
    (6, "controller", Kind::Bool),
    (7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    (1, "name", Kind::Text),
    (2, "generateName", Kind::Text),
    (3, "namespace", Kind::Text),
    (5, "uid", Kind::Text),
    (6, "resourceVersion", Kind::Text),
    (7, "generation", Kind::Int),
    (8, "creationTimestamp", Kind::Time),
    (10, "deletionGracePeriodSeconds", Kind::Int),
    (11, "labels", Kind::TextMap),
    (12, "annotations", Kind::TextMap),
    (13, "ownerReferences", Kind::MessageList(OWNER_REFERENCE)),
    (14, "finalizers", Kind::TextList),
];

const OBJECT_REFERENCE: &[Field] = &[
    (1, "kind", Kind::Text),
    (2, "namespace", Kind::Text),
    (3, "name", Kind::Text),
    (4, "uid", Kind::Text),
    (5, "apiVersion", Kind::Text),
];

const LOCAL_OBJECT_REFERENCE: &[Field] = &[(1, "name", Kind::Text)];

const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "data", Kind::TextMap),
    (3, "binaryData", Kind::BytesMap),
    (4, "immutable", Kind::Bool),
];

const SECRET: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "data", Kind::BytesMap),
    (3, "type", Kind::Text),
    (4, "stringData", Kind::TextMap),
    (5, "immutable", Kind::Bool),
];

const NAMESPACE: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (
        2,
        "spec",
        Kind::Message(&[(1, "finalizers", Kind::TextList)]),
    ),
];

const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "secrets", Kind::MessageList(OBJECT_REFERENCE)),
    (
        3,
        "imagePullSecrets",
        Kind::MessageList(LOCAL_OBJECT_REFERENCE),
    ),
    (4, "automountServiceAccountToken", Kind::Bool),
];

const PRECONDITIONS: &[Field] = &[(1, "uid", Kind::Text), (2, "resourceVersion", Kind::Text)];

const DELETE_OPTIONS: &[Field] = &[
    (1, "gracePeriodSeconds", Kind::Int),
    (2, "preconditions", Kind::Message(PRECONDITIONS)),
    (3, "orphanDependents", Kind::Bool),
    (4, "propagationPolicy", Kind::Text),
    (5, "dryRun", Kind::TextList),
];

const EVICTION: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "deleteOptions", Kind::Message(DELETE_OPTIONS)),
];

const RESOURCE_ATTRIBUTES: &[Field] = &[
    (1, "namespace", Kind::Text),
    (2, "verb", Kind::Text),
    (3, "group", Kind::Text),
    (4, "version", Kind::Text),
    (5, "resource", Kind::Text),
    (6, "subresource", Kind::Text),
    (7, "name", Kind::Text),
];

const NON_RESOURCE_ATTRIBUTES: &[Field] = &[(1, "path", Kind::Text), (2, "verb", Kind::Text)];

const ACCESS_REVIEW_SPEC: &[Field] = &[
    (1, "resourceAttributes", Kind::Message(RESOURCE_ATTRIBUTES)),
    (
        2,
        "nonResourceAttributes",
        Kind::Message(NON_RESOURCE_ATTRIBUTES),
    ),
    (3, "user", Kind::Text),
    (4, "groups", Kind::TextList),
    (6, "uid", Kind::Text),
];

const ACCESS_REVIEW: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(ACCESS_REVIEW_SPEC)),
];

const RULES_REVIEW: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(&[(1, "namespace", Kind::Text)])),
];

const TOKEN_REVIEW: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (
        2,
        "spec",
        Kind::Message(&[(1, "token", Kind::Text), (2, "audiences", Kind::TextList)]),
    ),
];

const SELF_SUBJECT_REVIEW: &[Field] = &[(1, "metadata", Kind::Message(OBJECT_META))];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    (1, "kind", Kind::Text),
    (2, "apiVersion", Kind::Text),
    (3, "name", Kind::Text),
    (4, "uid", Kind::Text),
];

const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (
        2,
        "spec",
        Kind::Message(&[
            (1, "audiences", Kind::TextList),
            (3, "boundObjectRef", Kind::Message(BOUND_OBJECT_REFERENCE)),
            (4, "expirationSeconds", Kind::Int),
        ]),
    ),
];

const SUBJECT: &[Field] = &[
    (1, "kind", Kind::Text),
    (2, "apiGroup", Kind::Text),
    (3, "name", Kind::Text),
    (4, "namespace", Kind::Text),
];

const ROLE_REF: &[Field] = &[
    (1, "apiGroup", Kind::Text),
    (2, "kind", Kind::Text),
    (3, "name", Kind::Text),
];

const ROLE_BINDING: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "subjects", Kind::MessageList(SUBJECT)),
    (3, "roleRef", Kind::Message(ROLE_REF)),
];

const POLICY_RULE: &[Field] = &[
    (1, "verbs", Kind::TextList),
    (2, "apiGroups", Kind::TextList),
    (3, "resources", Kind::TextList),
    (4, "resourceNames", Kind::TextList),
    (5, "nonResourceURLs", Kind::TextList),
];

const LABEL_SELECTOR_REQUIREMENT: &[Field] = &[
    (1, "key", Kind::Text),
    (2, "operator", Kind::Text),
    (3, "values", Kind::TextList),
];

const LABEL_SELECTOR: &[Field] = &[
    (1, "matchLabels", Kind::TextMap),
    (
        2,
        "matchExpressions",
        Kind::MessageList(LABEL_SELECTOR_REQUIREMENT),
    ),
];

const ROLE: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "rules", Kind::MessageList(POLICY_RULE)),
    (
        3,
        "aggregationRule",
        Kind::Message(&[(1, "clusterRoleSelectors", Kind::MessageList(LABEL_SELECTOR))]),
    ),
];

fn schema_of(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "RoleBinding" | "ClusterRoleBinding" => Some(ROLE_BINDING),
        "Role" | "ClusterRole" => Some(ROLE),
        "SelfSubjectAccessReview" | "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            Some(ACCESS_REVIEW)
        }
        "SelfSubjectRulesReview" => Some(RULES_REVIEW),
        "TokenReview" => Some(TOKEN_REVIEW),
        "SelfSubjectReview" => Some(SELF_SUBJECT_REVIEW),
        "TokenRequest" => Some(TOKEN_REQUEST),
        "ConfigMap" => Some(CONFIG_MAP),
        "Secret" => Some(SECRET),
        "Namespace" => Some(NAMESPACE),
        "ServiceAccount" => Some(SERVICE_ACCOUNT),
        "Eviction" => Some(EVICTION),
        "DeleteOptions" => Some(DELETE_OPTIONS),
        _ => None,
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.position).ok_or("truncated varint")?;
            self.position += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint too long".into())
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.position >= self.bytes.len() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.position += 8;
                Wire::Fixed
            }
            2 => {
                let length = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
                let end = self.position.checked_add(length).ok_or("length overflow")?;
                let slice = self
                    .bytes
                    .get(self.position..end)
                    .ok_or("truncated field")?;
                self.position = end;
                Wire::Bytes(slice)
            }
            5 => {
                self.position += 4;
                Wire::Fixed
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((tag >> 3, wire)))
    }
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "invalid UTF-8 in a string field".to_owned())
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(ALPHABET[(n >> 18) as usize & 63] as char);
        out.push(ALPHABET[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            ALPHABET[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            ALPHABET[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

fn map_entry(bytes: &[u8], value_as_bytes: bool) -> Result<(String, Value), String> {
    let mut reader = Reader { bytes, position: 0 };
    let (mut key, mut value) = (String::new(), json!(""));
    while let Some((number, wire)) = reader.next()? {
        if let Wire::Bytes(slice) = wire {
            match number {
                1 => key = text(slice)?,
                2 if value_as_bytes => value = json!(base64(slice)),
                2 => value = json!(text(slice)?),
                _ => {}
            }
        }
    }
    Ok((key, value))
}

fn message(bytes: &[u8], schema: &[Field]) -> Result<Value, String> {
    let mut object = Map::new();
    let mut reader = Reader { bytes, position: 0 };
    while let Some((number, wire)) = reader.next()? {
        let Some((_, name, kind)) = schema.iter().find(|(field, _, _)| *field == number) else {
            continue;
        };
        let name = (*name).to_owned();
        match (kind, wire) {
            (Kind::Text, Wire::Bytes(slice)) => {
                object.insert(name, json!(text(slice)?));
            }
            (Kind::Int, Wire::Varint(value)) => {
                object.insert(name, json!(value as i64));
            }
            (Kind::Bool, Wire::Varint(value)) => {
                object.insert(name, json!(value != 0));
            }
            (Kind::Time, Wire::Bytes(slice)) => {
                let time = message(slice, &[(1, "seconds", Kind::Int)])?;
                let seconds = time["seconds"].as_i64().unwrap_or(0);
                if let Ok(at) = jiff::Timestamp::from_second(seconds) {
                    object.insert(name, json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
                }
            }
            (Kind::Message(inner), Wire::Bytes(slice)) => {
                object.insert(name, message(slice, inner)?);
            }
            (Kind::TextMap | Kind::BytesMap, Wire::Bytes(slice)) => {
                let (key, value) = map_entry(slice, matches!(kind, Kind::BytesMap))?;
                let entry = object.entry(name).or_insert_with(|| json!({}));
                entry[key] = value;
            }
            (Kind::TextList, Wire::Bytes(slice)) => {
                let entry = object.entry(name).or_insert_with(|| json!([]));
                if let Some(items) = entry.as_array_mut() {
                    items.push(json!(text(slice)?));
                }
            }
            (Kind::MessageList(inner), Wire::Bytes(slice)) => {
                let item = message(slice, inner)?;
                let entry = object.entry(name).or_insert_with(|| json!([]));
                if let Some(items) = entry.as_array_mut() {
                    items.push(item);
                }
            }
            _ => {
                return Err(format!(
                    "field {number} ({name}) has an unexpected wire type"
                ));
            }
        }
    }
    Ok(Value::Object(object))
}

/// Decodes a `k8s\0`-framed protobuf body into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("a protobuf body must start with the k8s\\0 magic")?;
    let mut reader = Reader {
        bytes: envelope,
        position: 0,
    };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((number, wire)) = reader.next()? {
        if let Wire::Bytes(slice) = wire {
            match number {
                1 => {
                    let type_meta = message(
                        slice,
                        &[(1, "apiVersion", Kind::Text), (2, "kind", Kind::Text)],
                    )?;
                    api_version = type_meta["apiVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    kind = type_meta["kind"].as_str().unwrap_or_default().to_owned();
                }
                2 => raw = slice,
                _ => {}
            }
        }
    }
    let schema = schema_of(&kind).ok_or_else(|| {
        format!(
            "the emulator decodes protobuf bodies only for ConfigMap, Secret, Namespace, ServiceAccount, Eviction, TokenRequest, RBAC roles and bindings and the access, rules, token and self reviews, not {kind} ({api_version}); send JSON"
        )
    })?;
    let mut object = message(raw, schema)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((number << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    fn entry(key: &str, value: &[u8]) -> Vec<u8> {
        [field(1, key.as_bytes()), field(2, value)].concat()
    }

    #[test]
    fn a_protobuf_config_map_decodes_to_its_json_form() {
        let metadata = [field(1, b"cm"), field(11, &entry("app", b"web"))].concat();
        let config_map = [
            field(1, &metadata),
            field(2, &entry("k", b"v")),
            field(3, &entry("bin", b"\x00\x01")),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &config_map)].concat();
        let decoded = decode(&body).expect("decodes");
        assert_eq!(
            decoded,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "labels": {"app": "web"}},
                "data": {"k": "v"},
                "binaryData": {"bin": "AAE="}
            })
        );
    }

    #[test]
    fn an_unsupported_protobuf_kind_is_named_in_the_error() {
        let type_meta = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta)].concat();
        let error = decode(&body).expect_err("unsupported");
        assert!(error.contains("not Deployment (apps/v1)"), "{error}");
    }

    #[test]
    fn a_truncated_body_is_an_error_not_a_panic() {
        let body = [MAGIC.to_vec(), vec![0x0a, 0x40, 0x01]].concat();
        assert!(decode(&body).is_err());
    }
}
