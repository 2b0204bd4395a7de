//! PASV and EPSV reply texts: never a panic, never port 0.
#![no_main]

use bftp_ftp::parse::{parse_epsv, parse_pasv};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(addr) = parse_pasv(&text) {
        assert_ne!(addr.port(), 0);
    }
    if let Ok(port) = parse_epsv(&text) {
        assert_ne!(port, 0);
    }
});
