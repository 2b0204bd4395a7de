//! Unique (STOU) copies: the names announced and claimed, and the files a failed STOU left.

use super::*;

/// What a unique copy's STOUs announced, for its ledger entry (empty for another command):
/// the names, who else one of them was told to, and the source's size as fenced.
pub(super) struct UniqueCopy {
    pub(super) announced: Vec<String>,
    pub(super) collided: Option<String>,
    pub(super) source_size: Option<u64>,
}

impl Run {
    /// The names the job's members already claim: recorded copies and announced names.
    pub(super) fn load_claims(&self, members: &[Member]) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        for m in members {
            let announced = match &m.intent {
                Some(Intent::Unique {
                    announced: Some(n), ..
                }) => Some(n),
                _ => None,
            };
            for n in m.stored_as.iter().chain(announced) {
                claims.entry(n.clone()).or_insert_with(|| m.name.clone());
            }
        }
    }
}

impl Run {
    /// Who a unique copy's announced name is announced to in the daemon's memory of names.
    pub(super) fn owner(&self, m: &Member) -> String {
        format!("job {} file {:?}", self.id.0, m.name)
    }

    /// `name` was announced to member `m`: recorded as its claim, unless another member of
    /// this job, or another copy of this daemon (of any node, with a shared store) lately,
    /// has it: then who.
    pub(super) async fn claim(
        &self,
        dir: Option<&DirGuard>,
        m: &Member,
        name: &str,
    ) -> Option<String> {
        let lately = match dir {
            Some(d) => d.claim(name, &self.owner(m)).await,
            None => None,
        };
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        match claims.get(name) {
            Some(other) if *other != m.name => Some(format!("{other:?} of this job")),
            _ => {
                claims.insert(name.to_owned(), m.name.clone());
                lately
            }
        }
    }

    pub(super) async fn claimed_by_other(
        &self,
        dir: Option<&DirGuard>,
        m: &Member,
        name: &str,
    ) -> Option<String> {
        let this_job = {
            let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            match claims.get(name) {
                Some(other) if *other != m.name => Some(format!("{other:?} of this job")),
                _ => None,
            }
        };
        match (this_job, dir) {
            (Some(other), _) => Some(other),
            (None, Some(d)) => d.claimed_by_other(name, &self.owner(m)).await,
            (None, None) => None,
        }
    }

    /// A name of `m`'s whose file is gone: the claim is let go.
    pub(super) async fn release(&self, dir: Option<&DirGuard>, m: &Member, name: &str) {
        {
            let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            if claims.get(name) == Some(&m.name) {
                claims.remove(name);
            }
        }
        if let Some(d) = dir {
            d.release(name, &self.owner(m)).await;
        }
    }
}

impl Run {
    /// After a failed unique copy: each file its STOUs may have left is deleted when provably
    /// ours, else kept; `Some(why)` when any was kept (the member is then `uncertain`), and
    /// also when the destination was touched but never said which name it chose.
    pub(super) async fn unique_left(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        report: &bftp_ftp::AttemptReport,
        unique: &UniqueCopy,
        mismatch: bool,
    ) -> Option<String> {
        let mut names: Vec<String> = unique.announced.clone();
        for n in report.stou_left.iter().chain(report.stou_name.as_ref()) {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        if names.is_empty() {
            return report.destination_touched.then(|| {
                "the destination accepted STOU but named no file: a file may exist; not repeated"
                    .to_owned()
            });
        }
        let mut kept = Vec::new();
        for name in &names {
            if let Err(why) = self
                .settle_partial(pair, mc, name, unique.source_size, mismatch)
                .await
            {
                kept.push(why);
            }
        }
        (!kept.is_empty()).then(|| kept.join("; "))
    }

    /// One file a failed STOU announced: gone (no such file, or deleted because it is
    /// provably ours: see `bftp_core::intent::unique_partial_is_ours`), or `Err(why)` kept.
    pub(super) async fn settle_partial(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        name: &str,
        source_size: Option<u64>,
        mismatch: bool,
    ) -> Result<(), String> {
        let (m, dir) = (mc.m, mc.dir());
        if let Some(other) = self.claimed_by_other(dir, m, name).await {
            return Err(format!(
                "the server announced {name:?}, a name it also gave {other}: not deleted"
            ));
        }
        if mismatch {
            return Err(format!(
                "SIZE of {name:?} does not match the source after the server reported the copy \
                 complete: the server may have stored this copy under another name (Pure-FTPd \
                 stores NAME.1 when NAME exists) and {name:?} may be another's file: not deleted"
            ));
        }
        if bftp_ftp::parse::validate_server_path(name, "").is_err() {
            return Err(format!(
                "the announced name {name:?} is not a plain name: not deleted"
            ));
        }
        let dest_dir = &mc.req.dest_path;
        let path = if name.starts_with('/') {
            name.to_owned()
        } else {
            crate::lanes::paths::join_path(dest_dir, name)
        };
        if !pair.is_usable() {
            if let Err(e) = pair.reopen("to settle a partial STOU file").await {
                return Err(format!("{name:?} may remain: {e}"));
            }
        }
        let probe = match pair.size(Side::Destination, &path).await {
            Ok(Some(n)) => Probe::Size(n),
            Ok(None) => {
                self.release(dir, m, name).await;
                return Ok(());
            }
            Err(e) => Probe::Failed {
                reason: e.to_string(),
                transient: e.disposition().is_transient(),
            },
        };
        if !bftp_core::intent::unique_partial_is_ours(false, false, &probe, source_size) {
            let size = match &probe {
                Probe::Size(n) => format!("{n} bytes"),
                Probe::Absent => "absent".into(),
                Probe::Failed { reason, .. } => format!("SIZE failed: {reason}"),
            };
            let source = source_size.map_or("unknown".into(), |s| format!("{s} bytes"));
            return Err(format!(
                "the file {name:?} a failed STOU left ({size}; the source {source}) cannot be \
                 proven ours: not deleted"
            ));
        }
        match pair.delete(Side::Destination, &path).await {
            Ok(_) => {
                self.release(dir, m, name).await;
                Ok(())
            }
            Err(e) => Err(format!(
                "the partial file {name:?} could not be deleted: {e}"
            )),
        }
    }
}
