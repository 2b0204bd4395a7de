//! The content digest: one 128-bit value in the `meta` tree that stands for every record and
//! index entry of the other trees.
//!
//! sled 0.34 recovers a damaged `db` file without a word: a page whose newest version was
//! overwritten comes back as an older version of itself (a leaf of the jobs tree with a
//! hundred jobs fewer, a member back to `pending`), and the commit counter in `meta` (checked
//! against the watermark file) says nothing when `meta`'s own page survived. The digest is the
//! XOR of one hash per entry, so a transaction keeps it current from the entries it writes
//! (sled hands back each old value) and a full scan recomputes it: any entry lost, added or
//! reverted makes the two differ.

use crate::keys;

/// XOR of [`Digest::entry`] over all entries. Each entry's hash names its tree (by its
/// position in `TREES`, which must therefore never be reordered) and its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Digest(pub [u8; 16]);

impl Digest {
    /// Adds the entry if it is not in the digest, takes it out if it is.
    pub(crate) fn toggle(&mut self, tree: u8, key: &[u8], value: &[u8]) {
        let mut h = blake3::Hasher::new();
        h.update(&[tree]);
        h.update(&(key.len() as u64).to_be_bytes());
        h.update(key);
        h.update(value);
        for (d, b) in self.0.iter_mut().zip(h.finalize().as_bytes()) {
            *d ^= b;
        }
    }

    pub(crate) fn decode(v: &[u8]) -> Result<Digest, crate::StoreError> {
        let bytes: [u8; 16] = v
            .try_into()
            .map_err(|_| keys::corrupt_key("meta", keys::META_DIGEST, "not 16 bytes"))?;
        Ok(Digest(bytes))
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toggling_twice_is_nothing_and_order_does_not_matter() {
        let mut a = Digest::default();
        a.toggle(1, b"k1", b"v1");
        a.toggle(2, b"k2", b"v2");
        let mut b = Digest::default();
        b.toggle(2, b"k2", b"v2");
        b.toggle(1, b"k1", b"v1");
        assert_eq!(a, b);
        assert_ne!(a, Digest::default());
        a.toggle(1, b"k1", b"v1");
        a.toggle(2, b"k2", b"v2");
        assert_eq!(a, Digest::default());
    }

    #[test]
    fn tree_key_and_value_all_count() {
        let one = |tree, k: &[u8], v: &[u8]| {
            let mut d = Digest::default();
            d.toggle(tree, k, v);
            d
        };
        let base = one(1, b"ab", b"c");
        assert_ne!(base, one(2, b"ab", b"c"));
        assert_ne!(base, one(1, b"a", b"bc"), "the key's length is hashed");
        assert_ne!(base, one(1, b"ab", b"d"));
    }
}
