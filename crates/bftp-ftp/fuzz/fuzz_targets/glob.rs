//! The wildcard matcher: never a panic, never a blow-up, on any pattern.
#![no_main]

use bftp_ftp::parse::glob_match;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (pattern, name) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = glob_match(pattern, name);
});
