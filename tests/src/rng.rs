//! A seeded, reproducible random sequence for the crash tests: the seed is printed, and
//! `BFTP_TEST_SEED` replays a run (its file sizes, its kill moments).

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// `BFTP_TEST_SEED`, else the clock's nanoseconds.
pub fn seed() -> u64 {
    match std::env::var("BFTP_TEST_SEED") {
        Ok(s) => s.parse().expect("BFTP_TEST_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}
