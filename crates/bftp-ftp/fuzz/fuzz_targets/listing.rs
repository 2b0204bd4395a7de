//! NLST and MLSD data: every name that comes out is safe to put in a command.
#![no_main]

use bftp_ftp::parse::{check_argument, parse_mlsd, parse_nlst};
use libfuzzer_sys::fuzz_target;

fn safe(name: &str) -> bool {
    !name.is_empty()
        && check_argument(name).is_ok()
        && !name.contains('/')
        && name != "."
        && name != ".."
}

fuzz_target!(|data: &[u8]| {
    for dir in ["/pub", "pub", "", "/"] {
        assert!(parse_nlst(data, dir).names.iter().all(|n| safe(n)));
        assert!(parse_mlsd(data, dir).entries.iter().all(|e| safe(&e.name)));
    }
});
