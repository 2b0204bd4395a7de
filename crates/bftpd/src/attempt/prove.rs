//! The proof step after a copy both servers reported done.

use super::*;

impl Run {
    /// The proof step after a copy both servers reported done (`crate::lanes::proof`); `None` for
    /// any other outcome. Its commands go into the attempt's transcript.
    pub(super) async fn prove(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        outcome: &CopyOutcome,
    ) -> Option<crate::lanes::proof::Proven> {
        let (spec, m, req) = (mc.spec, mc.m, &mc.req);
        let CopyOutcome::Succeeded {
            size_check,
            stou_name,
            ..
        } = outcome
        else {
            return None;
        };
        let dest = match spec.dest_command {
            DestCommand::Unique => stou_name.as_ref().map(|name| {
                if name.starts_with('/') {
                    name.clone()
                } else {
                    crate::lanes::paths::join_path(&req.dest_path, name)
                }
            }),
            _ => Some(req.dest_path.clone()),
        };
        let size = m.size.or(source_size(size_check));
        let stream = crate::lanes::proof::stream_of(outcome.report());
        let proven = crate::lanes::proof::after_copy(
            pair,
            spec,
            (&mc.src_path, dest.as_deref()),
            size_check,
            size,
            stream.as_ref(),
        )
        .await;
        self.keep(pair.take_transcript());
        Some(proven)
    }
}
