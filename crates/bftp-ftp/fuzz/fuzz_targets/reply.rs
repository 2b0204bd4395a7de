//! The reply parser, one-shot and incremental, must agree and never panic.
#![no_main]

use bftp_ftp::parse::{parse_reply, Parsed, ReplyLimits, ReplyParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = ReplyLimits {
        max_line_len: 128,
        max_reply_len: 1024,
    };
    let mut one_shot = Vec::new();
    let mut rest = data;
    while let Ok(Parsed::Complete { reply, consumed }) = parse_reply(rest, &limits) {
        assert!(consumed > 0 && consumed <= rest.len() && consumed <= limits.max_reply_len);
        one_shot.push(reply);
        rest = &rest[consumed..];
    }
    // Feed the same bytes in pieces whose sizes come from the data itself.
    let mut parser = ReplyParser::new(limits);
    let mut incremental = Vec::new();
    let mut fed = 0;
    'feed: while fed < data.len() {
        let piece = 1 + usize::from(data[fed]) % (data.len() - fed);
        parser.feed(&data[fed..fed + piece]);
        fed += piece;
        loop {
            match parser.next_reply() {
                Ok(Some(reply)) => incremental.push(reply),
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    assert_eq!(one_shot, incremental);
});
