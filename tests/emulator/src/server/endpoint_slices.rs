//! What a real API server refuses in an EndpointSlice (`discovery.k8s.io/v1`), as far
//! as Shoal relies on it (kube-apiserver's `pkg/apis/discovery/validation`):
//! `addressType` required, one of `IPv4`, `IPv6`, `FQDN`, and immutable; at most
//! 1000 endpoints; each with 1 to 100 addresses valid for the address type; at most
//! 20000 ports, each number 1–65535, names DNS labels and unique.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::errors::Cause;
use super::validation::{cause, is_dns_label, is_dns_subdomain};

/// Most endpoints in one slice.
pub const MAX_ENDPOINTS: usize = 1000;
/// Most addresses of one endpoint.
pub const MAX_ADDRESSES: usize = 100;
/// Most ports of one slice.
pub const MAX_PORTS: usize = 20000;
const ADDRESS_TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];

/// The problems of `slice` (and, on update, of changing `old` into it).
pub fn validate(slice: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let address_type = slice["addressType"].as_str().unwrap_or_default();
    if address_type.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "addressType",
            "Required value".to_owned(),
        ));
    } else if !ADDRESS_TYPES.contains(&address_type) {
        causes.push(cause(
            "FieldValueNotSupported",
            "addressType",
            format!(
                "Unsupported value: {address_type:?}: supported values: \"FQDN\", \"IPv4\", \"IPv6\""
            ),
        ));
    }
    if let Some(old) = old
        && old["addressType"] != slice["addressType"]
    {
        causes.push(cause(
            "FieldValueInvalid",
            "addressType",
            format!("Invalid value: {:?}: field is immutable", address_type),
        ));
    }
    let endpoints = slice["endpoints"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if endpoints.len() > MAX_ENDPOINTS {
        causes.push(cause(
            "FieldValueTooMany",
            "endpoints",
            format!(
                "Too many: {}: must have at most {MAX_ENDPOINTS} items",
                endpoints.len()
            ),
        ));
    }
    for (index, endpoint) in endpoints.iter().enumerate() {
        let field = format!("endpoints[{index}].addresses");
        let addresses = endpoint["addresses"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if addresses.is_empty() {
            causes.push(cause(
                "FieldValueRequired",
                &field,
                "Required value: must contain at least 1 address".to_owned(),
            ));
        } else if addresses.len() > MAX_ADDRESSES {
            causes.push(cause(
                "FieldValueTooMany",
                &field,
                format!(
                    "Too many: {}: must have at most {MAX_ADDRESSES} items",
                    addresses.len()
                ),
            ));
        }
        for (position, address) in addresses.iter().enumerate() {
            let text = address.as_str().unwrap_or_default();
            let problem = match address_type {
                "IPv4" => text
                    .parse::<Ipv4Addr>()
                    .is_err()
                    .then_some("must be a valid IPv4 address"),
                "IPv6" => text
                    .parse::<Ipv6Addr>()
                    .is_err()
                    .then_some("must be a valid IPv6 address"),
                "FQDN" => (!is_dns_subdomain(text)).then_some("must be a valid DNS subdomain"),
                _ => None,
            };
            if let Some(problem) = problem {
                causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}[{position}]"),
                    format!("Invalid value: {text:?}: {problem}"),
                ));
            }
        }
    }
    let ports = slice["ports"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if ports.len() > MAX_PORTS {
        causes.push(cause(
            "FieldValueTooMany",
            "ports",
            format!(
                "Too many: {}: must have at most {MAX_PORTS} items",
                ports.len()
            ),
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for (index, port) in ports.iter().enumerate() {
        if let Some(number) = port.get("port").filter(|number| !number.is_null()) {
            let valid = number.as_i64().is_some_and(|n| (1..=65535).contains(&n));
            if !valid {
                causes.push(cause(
                    "FieldValueInvalid",
                    &format!("ports[{index}].port"),
                    format!("Invalid value: {number}: must be between 1 and 65535, inclusive"),
                ));
            }
        }
        let name = port["name"].as_str().unwrap_or_default();
        if !name.is_empty() && !is_dns_label(name) {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("ports[{index}].name"),
                format!("Invalid value: {name:?}: must be a DNS label"),
            ));
        }
        if !names.insert(name) {
            causes.push(cause(
                "FieldValueDuplicate",
                &format!("ports[{index}].name"),
                format!("Duplicate value: {name:?}"),
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|cause| cause.field.as_str()).collect()
    }

    #[test]
    fn a_slice_needs_a_known_address_type_that_never_changes() {
        assert_eq!(fields(&validate(&json!({}), None)), ["addressType"]);
        let causes = validate(&json!({"addressType": "IPv5"}), None);
        assert!(causes[0].message.contains("supported values"), "{causes:?}");
        let old = json!({"addressType": "IPv4"});
        let causes = validate(&json!({"addressType": "IPv6"}), Some(&old));
        assert!(
            causes[0].message.ends_with("field is immutable"),
            "{causes:?}"
        );
    }

    #[test]
    fn endpoints_are_bounded_and_their_addresses_valid_for_the_type() {
        let endpoint = json!({"addresses": ["10.0.0.1"]});
        let many = json!({"addressType": "IPv4", "endpoints": vec![endpoint.clone(); 1001]});
        assert_eq!(fields(&validate(&many, None)), ["endpoints"]);
        let limit = json!({"addressType": "IPv4", "endpoints": vec![endpoint; 1000]});
        assert!(validate(&limit, None).is_empty());
        let wrong = json!({"addressType": "IPv6", "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": []}]});
        assert_eq!(
            fields(&validate(&wrong, None)),
            ["endpoints[0].addresses[0]", "endpoints[1].addresses"]
        );
    }

    #[test]
    fn port_numbers_are_one_to_65535_with_unique_label_names() {
        let slice = json!({"addressType": "IPv4", "ports": [
            {"name": "tcp-80", "port": 80, "protocol": "TCP"},
            {"name": "tcp-80", "port": 0},
            {"name": "Bad_Name", "port": 65536},
        ]});
        assert_eq!(
            fields(&validate(&slice, None)),
            [
                "ports[1].port",
                "ports[1].name",
                "ports[2].port",
                "ports[2].name"
            ]
        );
    }
}
