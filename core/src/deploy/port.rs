//! Ports a plan's applications listen on.
//!
//! A [`Port`] is a transport [`Protocol`] and a number (1–65535). Two
//! instances that need the same port are never placed on one member
//! (see [`super::placement`]); a member's slice carries each application's
//! ports, and exec mode hands them to the instance's process
//! (`SHOAL_PORTS`). Text form: `TCP/80`, `UDP/53` (protocol in upper case;
//! [`Port::from_str`](std::str::FromStr) also reads lower case).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A transport protocol. Orders `TCP` before `UDP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP.
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
}

impl Protocol {
    /// `TCP` or `UDP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One port: protocol and number. Ordered by protocol, then number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Port {
    /// `TCP` or `UDP`.
    pub protocol: Protocol,
    /// The port number, 1–65535.
    pub port: u16,
}

impl Port {
    /// A TCP port.
    pub const fn tcp(port: u16) -> Port {
        Port {
            protocol: Protocol::Tcp,
            port,
        }
    }

    /// A UDP port.
    pub const fn udp(port: u16) -> Port {
        Port {
            protocol: Protocol::Udp,
            port,
        }
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.protocol, self.port)
    }
}

/// Text that is not `<TCP|UDP>/<1-65535>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a port: expected <TCP|UDP>/<number 1-65535>, e.g. TCP/80")]
pub struct PortParseError {
    /// The text given.
    pub text: String,
}

impl FromStr for Port {
    type Err = PortParseError;

    fn from_str(text: &str) -> Result<Port, PortParseError> {
        let error = || PortParseError {
            text: text.to_owned(),
        };
        let (protocol, number) = text.split_once('/').ok_or_else(error)?;
        let protocol = match protocol.to_ascii_uppercase().as_str() {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            _ => return Err(error()),
        };
        let canonical = !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
            && !number.starts_with('0');
        let port = number
            .parse::<u16>()
            .ok()
            .filter(|port| canonical && *port > 0)
            .ok_or_else(error)?;
        Ok(Port { protocol, port })
    }
}

/// Ports as `TCP/80,UDP/53`, in the order given (the form of `SHOAL_PORTS`).
pub fn render_ports<'a>(ports: impl IntoIterator<Item = &'a Port>) -> String {
    ports
        .into_iter()
        .map(Port::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_read_and_print_as_protocol_slash_number() {
        assert_eq!("TCP/80".parse(), Ok(Port::tcp(80)));
        assert_eq!("udp/53".parse(), Ok(Port::udp(53)));
        assert_eq!(Port::udp(53).to_string(), "UDP/53");
        for bad in [
            "80",
            "TCP/0",
            "TCP/65536",
            "SCTP/1",
            "TCP/080",
            "TCP/",
            "TCP/8 0",
        ] {
            assert!(bad.parse::<Port>().is_err(), "{bad}");
        }
        assert_eq!(
            render_ports(&[Port::tcp(80), Port::udp(53)]),
            "TCP/80,UDP/53"
        );
    }

    #[test]
    fn tcp_sorts_before_udp_then_by_number() {
        let mut ports = vec![Port::udp(1), Port::tcp(443), Port::tcp(80)];
        ports.sort();
        assert_eq!(ports, [Port::tcp(80), Port::tcp(443), Port::udp(1)]);
    }
}
