//! Data-connection addresses: the 227 PASV and 229 EPSV replies we read, the
//! PORT and EPRT arguments we send (RFC 959 §4.1.2, RFC 2428).
//!
//! The parsers return what the server announced, nothing more. Bounce
//! protection (RFC 2577, RULES.md §6) is the engine's: it ignores the announced host,
//! uses the control connection's peer address, and refuses a port below 1024
//! ([`is_privileged_port`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use super::text::truncate;

/// A PASV or EPSV reply without a usable address, or an address PORT cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("no h1,h2,h3,h4,p1,p2 address in PASV reply {text:?}")]
    NoPasvAddress { text: String },
    #[error("more than six numbers in the PASV address of {text:?}")]
    PasvTooManyNumbers { text: String },
    #[error("number {value} is out of range 0..=255 in PASV reply {text:?}")]
    PasvNumberOutOfRange { value: u32, text: String },
    #[error("no (|||port|) in EPSV reply {text:?}")]
    NoEpsvPort { text: String },
    #[error("port {value} is out of range in EPSV reply {text:?}")]
    EpsvPortOutOfRange { value: u32, text: String },
    #[error("server announced port 0 in {text:?}")]
    PortZero { text: String },
    #[error("PORT cannot carry the IPv6 address {addr}; use EPRT")]
    NotIpv4 { addr: IpAddr },
}

/// The address in a 227 reply's text: six decimal numbers separated by commas
/// (spaces around the commas tolerated), found anywhere in the text, with or
/// without parentheses: `Entering Passive Mode (192,168,1,2,195,80).`
///
/// The host is returned as announced, even when it is not the server's own
/// address; a port below 1024 is returned too. Both are for the engine to judge.
pub fn parse_pasv(text: &str) -> Result<SocketAddrV4, AddressError> {
    let bytes = text.as_bytes();
    let err_text = || truncate(text.to_owned());
    for start in 0..bytes.len() {
        let starts_number =
            bytes[start].is_ascii_digit() && (start == 0 || !bytes[start - 1].is_ascii_digit());
        if !starts_number {
            continue;
        }
        let Some((numbers, end)) = six_numbers(&bytes[start..]) else {
            continue;
        };
        if followed_by_number(&bytes[start + end..]) {
            return Err(AddressError::PasvTooManyNumbers { text: err_text() });
        }
        let mut octets = [0u8; 6];
        for (octet, &value) in octets.iter_mut().zip(&numbers) {
            *octet = u8::try_from(value).map_err(|_| AddressError::PasvNumberOutOfRange {
                value,
                text: err_text(),
            })?;
        }
        let [h1, h2, h3, h4, p1, p2] = octets;
        let port = u16::from_be_bytes([p1, p2]);
        if port == 0 {
            return Err(AddressError::PortZero { text: err_text() });
        }
        return Ok(SocketAddrV4::new(Ipv4Addr::new(h1, h2, h3, h4), port));
    }
    Err(AddressError::NoPasvAddress { text: err_text() })
}

/// Six comma-separated numbers at the start of `bytes`, and where they end.
/// Values saturate instead of overflowing; the caller checks the range.
fn six_numbers(bytes: &[u8]) -> Option<([u32; 6], usize)> {
    let mut numbers = [0u32; 6];
    let mut i = 0;
    for (n, slot) in numbers.iter_mut().enumerate() {
        if n > 0 {
            i = skip_comma(bytes, i)?;
        }
        let (value, len) = number(&bytes[i..])?;
        *slot = value;
        i += len;
    }
    Some((numbers, i))
}

/// Optional blanks, a comma, optional blanks: the index after them.
fn skip_comma(bytes: &[u8], mut i: usize) -> Option<usize> {
    while bytes.get(i).is_some_and(|&b| b == b' ' || b == b'\t') {
        i += 1;
    }
    if bytes.get(i) != Some(&b',') {
        return None;
    }
    i += 1;
    while bytes.get(i).is_some_and(|&b| b == b' ' || b == b'\t') {
        i += 1;
    }
    Some(i)
}

fn number(bytes: &[u8]) -> Option<(u32, usize)> {
    let len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if len == 0 {
        return None;
    }
    let value = bytes[..len].iter().fold(0u32, |n, &d| {
        n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
    });
    Some((value, len))
}

fn followed_by_number(bytes: &[u8]) -> bool {
    skip_comma(bytes, 0).is_some_and(|i| bytes.get(i).is_some_and(u8::is_ascii_digit))
}

/// The port in a 229 reply's text: `Entering Extended Passive Mode (|||6446|)`.
/// RFC 2428 lets the server pick any delimiter from `!` to `~` (the same one four
/// times); a digit is refused as a delimiter because it would be ambiguous.
pub fn parse_epsv(text: &str) -> Result<u16, AddressError> {
    let bytes = text.as_bytes();
    let err_text = || truncate(text.to_owned());
    for (open, _) in bytes.iter().enumerate().filter(|&(_, &b)| b == b'(') {
        let rest = &bytes[open + 1..];
        let Some(&delimiter) = rest.first() else {
            continue;
        };
        if !(b'!'..=b'~').contains(&delimiter) || delimiter.is_ascii_digit() {
            continue;
        }
        if rest.get(1) != Some(&delimiter) || rest.get(2) != Some(&delimiter) {
            continue;
        }
        let Some((value, len)) = number(&rest[3..]) else {
            continue;
        };
        if rest.get(3 + len) != Some(&delimiter) || rest.get(4 + len) != Some(&b')') {
            continue;
        }
        let port = u16::try_from(value).map_err(|_| AddressError::EpsvPortOutOfRange {
            value,
            text: err_text(),
        })?;
        if port == 0 {
            return Err(AddressError::PortZero { text: err_text() });
        }
        return Ok(port);
    }
    Err(AddressError::NoEpsvPort { text: err_text() })
}

/// Whether a port is one that only root may bind (RFC 2577: never point a server at one).
pub fn is_privileged_port(port: u16) -> bool {
    port < 1024
}

/// The argument of `PORT` for `addr`: `h1,h2,h3,h4,p1,p2`. An IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`, as a dual-stack socket reports an IPv4 peer) is
/// written as IPv4; any other IPv6 address needs EPRT.
pub fn port_argument(addr: SocketAddr) -> Result<String, AddressError> {
    let IpAddr::V4(ip) = addr.ip().to_canonical() else {
        return Err(AddressError::NotIpv4 { addr: addr.ip() });
    };
    let [h1, h2, h3, h4] = ip.octets();
    let [p1, p2] = addr.port().to_be_bytes();
    Ok(format!("{h1},{h2},{h3},{h4},{p1},{p2}"))
}

/// The argument of `EPRT` for `addr` (RFC 2428 §2): `|1|132.235.1.2|6275|` or
/// `|2|1080::8:800:200c:417a|5282|`. An IPv4-mapped IPv6 address is written as
/// IPv4; an IPv6 scope id is dropped (EPRT cannot carry it).
pub fn eprt_argument(addr: SocketAddr) -> String {
    match addr.ip().to_canonical() {
        IpAddr::V4(ip) => format!("|1|{ip}|{}|", addr.port()),
        IpAddr::V6(ip) => format!("|2|{ip}|{}|", addr.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    /// Whether an error is the expected one.
    type Check = fn(&AddressError) -> bool;

    fn v4(a: [u8; 4], port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(a), port)
    }

    #[test]
    fn pasv_addresses() {
        let table = [
            (
                "Entering Passive Mode (192,168,1,2,195,80).",
                v4([192, 168, 1, 2], 50000),
            ),
            (
                "Entering Passive Mode (192,168,1,2,195,80)",
                v4([192, 168, 1, 2], 50000),
            ),
            (
                "Entering Passive Mode 192,168,1,2,195,80",
                v4([192, 168, 1, 2], 50000),
            ),
            ("=127,0,0,1,4,1", v4([127, 0, 0, 1], 1025)),
            ("127,0,0,1,4,1", v4([127, 0, 0, 1], 1025)),
            ("(10, 0, 0, 1, 4, 0)", v4([10, 0, 0, 1], 1024)),
            ("( 10 ,0\t,0 , 1,4 ,0 )", v4([10, 0, 0, 1], 1024)),
            ("(010,000,000,001,004,000)", v4([10, 0, 0, 1], 1024)),
            ("(255,255,255,255,255,255)", v4([255; 4], 65535)),
            // Digits before the address are not mistaken for it.
            (
                "Mode 2 for 30 s, ok (10,1,2,3,200,1)",
                v4([10, 1, 2, 3], 51201),
            ),
            ("v1,2,3 then (10,1,2,3,200,1)", v4([10, 1, 2, 3], 51201)),
            // Another host than the server: returned as announced; the engine ignores it.
            (
                "Entering Passive Mode (169,254,169,254,0,80)",
                v4([169, 254, 169, 254], 80),
            ),
            // A privileged port: parsed, flagged by is_privileged_port.
            (
                "Entering Passive Mode (10,0,0,1,0,21)",
                v4([10, 0, 0, 1], 21),
            ),
        ];
        for (text, expected) in table {
            assert_eq!(parse_pasv(text), Ok(expected), "{text}");
        }
        assert!(is_privileged_port(
            parse_pasv("(10,0,0,1,0,21)").unwrap().port()
        ));
        assert!(!is_privileged_port(
            parse_pasv("(10,0,0,1,4,0)").unwrap().port()
        ));
    }

    #[test]
    fn pasv_errors() {
        let table: &[(&str, Check)] = &[
            ("Entering Passive Mode", |e| {
                matches!(e, AddressError::NoPasvAddress { .. })
            }),
            ("", |e| matches!(e, AddressError::NoPasvAddress { .. })),
            ("(1,2,3,4,5)", |e| {
                matches!(e, AddressError::NoPasvAddress { .. })
            }),
            ("(1,2,3,4,5,)", |e| {
                matches!(e, AddressError::NoPasvAddress { .. })
            }),
            ("(1.2.3.4:5000)", |e| {
                matches!(e, AddressError::NoPasvAddress { .. })
            }),
            ("(1,2,3,4,5,6,7)", |e| {
                matches!(e, AddressError::PasvTooManyNumbers { .. })
            }),
            ("(256,0,0,1,4,1)", |e| {
                matches!(e, AddressError::PasvNumberOutOfRange { value: 256, .. })
            }),
            ("(10,0,0,1,4,300)", |e| {
                matches!(e, AddressError::PasvNumberOutOfRange { value: 300, .. })
            }),
            ("(10,0,0,1,99999999999999999999,1)", |e| {
                matches!(
                    e,
                    AddressError::PasvNumberOutOfRange {
                        value: u32::MAX,
                        ..
                    }
                )
            }),
            ("(10,0,0,1,0,0)", |e| {
                matches!(e, AddressError::PortZero { .. })
            }),
        ];
        for (text, check) in table {
            let result = parse_pasv(text);
            assert!(result.as_ref().is_err_and(check), "{text}: {result:?}");
        }
    }

    #[test]
    fn pasv_error_text_is_truncated() {
        let text = "x".repeat(5000);
        match parse_pasv(&text) {
            Err(AddressError::NoPasvAddress { text }) => assert_eq!(text.chars().count(), 121),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn epsv_ports() {
        let table = [
            ("Entering Extended Passive Mode (|||6446|)", 6446),
            ("Entering Extended Passive Mode (|||6446|).", 6446),
            ("(!!!1025!)", 1025),
            ("(~~~65535~)", 65535),
            ("(###00021#)", 21),
            ("junk ( (|| (|||5000|)", 5000),
        ];
        for (text, port) in table {
            assert_eq!(parse_epsv(text), Ok(port), "{text}");
        }
        assert!(is_privileged_port(parse_epsv("(|||21|)").unwrap()));
    }

    #[test]
    fn epsv_errors() {
        let table: &[(&str, Check)] = &[
            ("Entering Extended Passive Mode", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(|||6446)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(||6446|)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(|!|6446|)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(|||6446!)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(||||)", |e| matches!(e, AddressError::NoEpsvPort { .. })),
            ("(   6446 )", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(1116446 1)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(|1|10.0.0.1|6446|)", |e| {
                matches!(e, AddressError::NoEpsvPort { .. })
            }),
            ("(", |e| matches!(e, AddressError::NoEpsvPort { .. })),
            ("(|||65536|)", |e| {
                matches!(e, AddressError::EpsvPortOutOfRange { value: 65536, .. })
            }),
            ("(|||0|)", |e| matches!(e, AddressError::PortZero { .. })),
        ];
        for (text, check) in table {
            let result = parse_epsv(text);
            assert!(result.as_ref().is_err_and(check), "{text}: {result:?}");
        }
    }

    #[test]
    fn port_and_eprt_arguments() {
        let v4addr: SocketAddr = "192.168.1.2:50000".parse().unwrap();
        assert_eq!(port_argument(v4addr).unwrap(), "192,168,1,2,195,80");
        assert_eq!(eprt_argument(v4addr), "|1|192.168.1.2|50000|");

        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1025".parse().unwrap();
        assert_eq!(port_argument(mapped).unwrap(), "10,0,0,1,4,1");
        assert_eq!(eprt_argument(mapped), "|1|10.0.0.1|1025|");

        let v6: SocketAddr = "[1080::8:800:200C:417A]:5282".parse().unwrap();
        assert_eq!(
            port_argument(v6),
            Err(AddressError::NotIpv4 {
                addr: IpAddr::V6("1080::8:800:200c:417a".parse::<Ipv6Addr>().unwrap())
            })
        );
        assert_eq!(eprt_argument(v6), "|2|1080::8:800:200c:417a|5282|");

        let scoped: SocketAddr = "[fe80::1%2]:2000".parse().unwrap();
        assert_eq!(eprt_argument(scoped), "|2|fe80::1|2000|");
    }

    #[test]
    fn formatted_arguments_parse_back() {
        for addr in [
            v4([1, 2, 3, 4], 1),
            v4([255, 0, 10, 200], 65535),
            v4([10, 0, 0, 1], 1024),
        ] {
            let arg = port_argument(SocketAddr::V4(addr)).unwrap();
            assert_eq!(parse_pasv(&arg), Ok(addr));
            let eprt = eprt_argument(SocketAddr::V4(addr));
            let port = eprt.trim_end_matches('|').rsplit('|').next().unwrap();
            assert_eq!(parse_epsv(&format!("(|||{port}|)")), Ok(addr.port()));
        }
    }
}
