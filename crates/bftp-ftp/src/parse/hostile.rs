//! Every parser against pseudo-random bytes: no panic, and the invariants the
//! engine relies on hold. A deterministic stand-in for the fuzz targets in
//! `crates/bftp-ftp/fuzz`, cheap enough for every `cargo test`.

use super::*;

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Bytes drawn mostly from pieces that matter to the parsers.
    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"\r\n",
            b"\n",
            b"\r",
            b"\0",
            b" ",
            b"-",
            b",",
            b"(",
            b")",
            b"|",
            b";",
            b"=",
            b":",
            b"/",
            b".",
            b"..",
            b"*",
            b"?",
            b"[",
            b"]",
            b"!",
            b"^",
            b"\\",
            b"220",
            b"211",
            b"123",
            b"599",
            b"600",
            b"099",
            b"255",
            b"256",
            b"65535",
            b"type=file",
            b"size=",
            b"modify=20240101120000",
            b"type=cdir",
            b"ls: ",
            b"No such file or directory",
            b"\xff",
            b"\xe9",
            b"\xc3\xa9",
            b"a",
            b"Z",
            b"0",
            b"9",
        ];
        let len = self.below(max_len + 1);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            if self.below(4) == 0 {
                out.push(self.next() as u8);
            } else {
                out.extend_from_slice(PIECES[self.below(PIECES.len())]);
            }
        }
        out
    }
}

const ROUNDS: usize = 3_000;

#[test]
fn reply_parsing_survives_and_agrees_with_itself() {
    let mut rng = Rng(0x5EED_0001);
    let limits = ReplyLimits {
        max_line_len: 64,
        max_reply_len: 256,
    };
    for _ in 0..ROUNDS {
        let input = rng.bytes(400);
        // The one-shot parser, repeatedly.
        let mut expected = Vec::new();
        let mut rest = &input[..];
        let end = loop {
            match parse_reply(rest, &limits) {
                Ok(Parsed::Complete { reply, consumed }) => {
                    assert!(consumed > 0 && consumed <= rest.len());
                    assert!(consumed <= limits.max_reply_len);
                    assert!(reply
                        .lines()
                        .iter()
                        .all(|l| !l.contains(['\r', '\n', '\0'])));
                    expected.push(reply);
                    rest = &rest[consumed..];
                }
                Ok(Parsed::NeedMore) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        // The incremental parser, fed in random pieces, sees the same.
        let mut parser = ReplyParser::new(limits);
        let mut got = Vec::new();
        let mut failure = None;
        let mut fed = 0;
        while fed < input.len() && failure.is_none() {
            let piece = 1 + rng.below(input.len() - fed);
            parser.feed(&input[fed..fed + piece]);
            fed += piece;
            loop {
                match parser.next_reply() {
                    Ok(Some(reply)) => got.push(reply),
                    Ok(None) => break,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
        assert_eq!(got, expected, "{input:?}");
        match (&end, &failure) {
            (Ok(()), None) => {}
            (Err(a), Some(b)) => assert_eq!(
                std::mem::discriminant(a),
                std::mem::discriminant(b),
                "{input:?}"
            ),
            (end, failure) => panic!("{input:?}: one-shot {end:?}, incremental {failure:?}"),
        }
    }
}

#[test]
fn address_parsers_survive() {
    let mut rng = Rng(0x5EED_0002);
    for _ in 0..ROUNDS {
        let text = String::from_utf8_lossy(&rng.bytes(120)).into_owned();
        if let Ok(addr) = parse_pasv(&text) {
            assert_ne!(addr.port(), 0);
        }
        if let Ok(port) = parse_epsv(&text) {
            assert_ne!(port, 0);
        }
    }
}

#[test]
fn listing_parsers_only_return_safe_names() {
    let mut rng = Rng(0x5EED_0003);
    for round in 0..ROUNDS {
        let data = rng.bytes(300);
        let dir = ["/pub", "pub", "", "/", "."][round % 5];
        let safe = |name: &str| {
            !name.is_empty()
                && check_argument(name).is_ok()
                && !name.contains('/')
                && name != "."
                && name != ".."
        };
        let nlst = parse_nlst(&data, dir);
        assert!(nlst.names.iter().all(|n| safe(n)), "{data:?}: {nlst:?}");
        let mlsd = parse_mlsd(&data, dir);
        assert!(
            mlsd.entries.iter().all(|e| safe(&e.name)),
            "{data:?}: {mlsd:?}"
        );
        let text = String::from_utf8_lossy(&data);
        if let Ok(name) = validate_server_path(&text, dir) {
            assert!(check_argument(&name).is_ok());
            assert!(!name.split('/').any(|c| c == ".." || c.is_empty()));
        }
        let _ = parse_size_reply(&text);
        let _ = parse_mdtm_reply(&text);
    }
}

#[test]
fn glob_survives_hostile_patterns() {
    let mut rng = Rng(0x5EED_0004);
    for _ in 0..ROUNDS {
        let pattern = String::from_utf8_lossy(&rng.bytes(40)).into_owned();
        let name = String::from_utf8_lossy(&rng.bytes(60)).into_owned();
        let _ = glob_match(&pattern, &name);
        let _ = is_glob_pattern(&pattern);
        // A pattern without wildcards matches exactly itself (after unescaping).
        if !is_glob_pattern(&pattern) && !pattern.contains('\\') {
            assert!(glob_match(&pattern, &pattern), "{pattern:?}");
        }
    }
}
