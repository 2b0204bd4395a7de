//! Limits learned from the servers (`bftp_core::hostlimit`): the `host_limits` tree, one
//! record per host, keyed by the lower-case host name.

use super::{OrAbort, SledStore};
use crate::error::{backend, StoreError};
use crate::record::{decode, encode, HostLimitV1};
use crate::VerifyReport;
use bftp_core::hostlimit::HostLimit;

fn key(host: &str) -> Vec<u8> {
    host.to_ascii_lowercase().into_bytes()
}

fn host_of(k: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(k.to_vec())
        .map_err(|_| crate::keys::corrupt_key("host_limits", k, "not UTF-8"))
}

impl SledStore {
    pub(super) fn learn_limit(&self, limit: &HostLimit) -> Result<(), StoreError> {
        let k = key(&limit.host);
        self.write("learn_host_limit", |tx| {
            if let Some(v) = tx.host_limits.get(&k)? {
                let kept = decode::<HostLimitV1>("host limit", &k, &v).or_abort()?;
                if !bftp_core::hostlimit::replaces(limit, &kept.to_core(&limit.host)) {
                    return Ok(());
                }
            }
            tx.host_limits
                .insert(&k, encode(&HostLimitV1::from_core(limit)))?;
            Ok(())
        })
    }

    pub(super) fn all_limits(&self) -> Result<Vec<HostLimit>, StoreError> {
        self.guarded("host_limits", || {
            let mut out = Vec::new();
            for kv in self.t.host_limits.iter() {
                let (k, v) = kv.map_err(backend("host_limits"))?;
                let host = host_of(&k)?;
                out.push(decode::<HostLimitV1>("host limit", &k, &v)?.to_core(&host));
            }
            Ok(out)
        })
    }

    pub(super) fn one_limit(&self, host: &str) -> Result<Option<HostLimit>, StoreError> {
        let k = key(host);
        self.guarded("host_limit", || {
            match self.t.host_limits.get(&k).map_err(backend("host_limit"))? {
                Some(v) => Ok(Some(
                    decode::<HostLimitV1>("host limit", &k, &v)?.to_core(&host_of(&k)?),
                )),
                None => Ok(None),
            }
        })
    }

    pub(super) fn raise_limit(
        &self,
        seen: &HostLimit,
        to: Option<&HostLimit>,
    ) -> Result<bool, StoreError> {
        let k = key(&seen.host);
        self.write("raise_host_limit", |tx| {
            let Some(v) = tx.host_limits.get(&k)? else {
                return Ok(false);
            };
            let kept = decode::<HostLimitV1>("host limit", &k, &v).or_abort()?;
            if kept.learned_at != seen.learned_at.0 || kept.limit != seen.limit {
                return Ok(false);
            }
            match to {
                Some(to) => tx
                    .host_limits
                    .insert(&k, encode(&HostLimitV1::from_core(to)))?,
                None => tx.host_limits.remove(&k)?,
            }
            Ok(true)
        })
    }

    /// `verify`: every learned limit decodes.
    pub(super) fn verify_limits(&self, r: &mut VerifyReport) -> Result<(), StoreError> {
        for kv in self.t.host_limits.iter() {
            let (k, v) = kv.map_err(backend("verify"))?;
            host_of(&k)?;
            decode::<HostLimitV1>("host limit", &k, &v)?;
            r.bytes += (k.len() + v.len()) as u64;
        }
        Ok(())
    }
}
