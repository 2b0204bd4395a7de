//! Fence an unrepeatable command with its intent, durable before it (RULES.md §4.3).

use super::*;

/// What a SIZE before an unrepeatable command found.
pub(super) enum Fence {
    /// The size (`None`: no such file on the destination).
    Size(Option<u64>),
    /// The server has no SIZE (or refused it for good), and it was not required.
    Unsupported,
    /// The member is settled (failed for good), or left pending for a retry.
    Settled(Option<Pending>),
}

impl Run {
    /// Fences an unrepeatable command with its intent, durable before it: for APPE the
    /// source's size and the destination's size before; for STOU the source's size (the
    /// evidence that settles it after a crash; unknown on a server without SIZE). `Ok(size)`:
    /// the source's size where asked; `Err(settled)`: the member is settled or left pending.
    pub(super) async fn fence(
        &self,
        pair: &mut Pair,
        mc: &mut MemberCtx<'_>,
    ) -> Result<Result<Option<u64>, Option<Pending>>, AttemptEnd> {
        let (spec, m, req) = (mc.spec, mc.m, &mut mc.req);
        let index = m.index;
        match spec.dest_command {
            DestCommand::Append => {
                let source_size = match self
                    .fence_size(pair, m, Side::Source, &req.source_path, true)
                    .await?
                {
                    Fence::Size(Some(s)) => s,
                    // Not produced for a required SIZE of the source (550 and failures settle).
                    Fence::Size(None) | Fence::Unsupported => return Ok(Err(None)),
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                let before = match self
                    .fence_size(pair, m, Side::Destination, &req.dest_path, true)
                    .await?
                {
                    Fence::Size(s) => s.unwrap_or(0),
                    // Not produced for a required SIZE (a failure settles).
                    Fence::Unsupported => return Ok(Err(None)),
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                // Asked just now on this pair: the copy need not ask again before APPE.
                req.source_size = Some(source_size);
                self.set_intent(
                    index,
                    Intent::Append {
                        before,
                        source_size,
                    },
                )
                .await?;
                Ok(Ok(Some(source_size)))
            }
            DestCommand::Unique => {
                // The source's size is the evidence that settles the STOU after a crash; a
                // server without SIZE leaves it unknown (then a crash makes it uncertain).
                let size = match self
                    .fence_size(pair, m, Side::Source, &req.source_path, false)
                    .await?
                {
                    Fence::Size(s) => s,
                    Fence::Unsupported => None,
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                req.source_size = size;
                self.set_intent(
                    index,
                    Intent::Unique {
                        source_size: size,
                        announced: None,
                    },
                )
                .await?;
                Ok(Ok(size))
            }
            DestCommand::Replace => Ok(Ok(None)),
        }
    }
}

impl Run {
    pub(super) async fn set_intent(&self, index: u32, intent: Intent) -> Result<(), AttemptEnd> {
        self.update(
            index,
            MemberUpdate {
                intent: Some(Some(intent)),
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(())
    }
}

impl Run {
    /// SIZE of `path` on `side` before an unrepeatable command. 550 on the source fails the
    /// member for good (no file to copy); a transient failure leaves it pending; another
    /// failure fails it for good when `required` (an append cannot be fenced without it),
    /// else is [`Fence::Unsupported`].
    pub(super) async fn fence_size(
        &self,
        pair: &mut Pair,
        m: &Member,
        side: Side,
        path: &str,
        required: bool,
    ) -> Result<Fence, AttemptEnd> {
        let fail = |detail: String| MemberUpdate {
            state: Some(MemberState::FailedPermanent),
            attempts: Some(m.attempts + 1),
            detail: Some(detail),
            ..Default::default()
        };
        let detail = match pair.size(side, path).await {
            Ok(Some(s)) => return Ok(Fence::Size(Some(s))),
            Ok(None) if side == Side::Destination => return Ok(Fence::Size(None)),
            Ok(None) => format!("the source file does not exist: SIZE {path} answered 550"),
            Err(e) if e.disposition().is_transient() => {
                return Ok(Fence::Settled(Some(e.to_string().into())))
            }
            Err(_) if !required => return Ok(Fence::Unsupported),
            Err(e) => format!("an append is fenced by SIZE of the {side}, which failed: {e}"),
        };
        self.update(m.index, fail(detail))
            .await
            .map_err(store_failed)?;
        Ok(Fence::Settled(None))
    }
}
