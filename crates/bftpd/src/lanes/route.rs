//! How a copy travelled, as a file's record keeps it (RULES.md §14): the same rule for an
//! attempt's ledger entry and a foreground transfer's result.

use bftp_core::route::Route;
use bftp_ftp::AttemptReport;

/// How one copy's bytes travelled, and what bftpd counted and hashed of a relayed stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Travelled {
    pub route: Route,
    /// A relay's bytes, as bftpd counted them.
    pub relayed_bytes: Option<u64>,
    /// A relay's stream SHA-256 (hex), when bftpd computed it.
    pub stream_sha256: Option<String>,
}

/// How the copy of `report` travelled: `None` for a copy that sent no data command (it
/// touched no file, so the file keeps the route of the copy that last did). The relay's
/// evidence goes only with a relay route.
pub fn travelled(report: &AttemptReport) -> Option<Travelled> {
    let route = report.route.clone()?;
    let relayed = report.relayed.as_ref().filter(|_| route.is_relay());
    Some(Travelled {
        relayed_bytes: relayed.map(|r| r.bytes),
        stream_sha256: relayed.and_then(|r| r.sha256.clone()),
        route,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::route::RelayReason;
    use bftp_ftp::RelayStats;

    fn stats() -> RelayStats {
        RelayStats {
            bytes: 4096,
            sha256: Some("ab".repeat(32)),
            mover: bftp_ftp::Mover::UserSpace,
            tls: [false, true],
        }
    }

    #[test]
    fn a_copys_route_and_a_relays_evidence_are_kept() {
        let refused = Route::Relay(RelayReason::Refused {
            reply: "425 no".into(),
        });
        // (route, relay stats) -> kept
        let rows: Vec<(Option<Route>, Option<RelayStats>, Option<Travelled>)> = vec![
            // No data command went out: nothing said, the last route stands.
            (None, None, None),
            (None, Some(stats()), None),
            (
                Some(Route::Fxp),
                None,
                Some(Travelled {
                    route: Route::Fxp,
                    relayed_bytes: None,
                    stream_sha256: None,
                }),
            ),
            // Stats beside a third-party route are no relay's: not kept.
            (
                Some(Route::FxpRolesSwapped),
                Some(stats()),
                Some(Travelled {
                    route: Route::FxpRolesSwapped,
                    relayed_bytes: None,
                    stream_sha256: None,
                }),
            ),
            (
                Some(refused.clone()),
                Some(stats()),
                Some(Travelled {
                    route: refused.clone(),
                    relayed_bytes: Some(4096),
                    stream_sha256: Some("ab".repeat(32)),
                }),
            ),
            (
                Some(refused.clone()),
                Some(RelayStats {
                    sha256: None,
                    ..stats()
                }),
                Some(Travelled {
                    route: refused.clone(),
                    relayed_bytes: Some(4096),
                    stream_sha256: None,
                }),
            ),
            (
                Some(refused.clone()),
                None,
                Some(Travelled {
                    route: refused,
                    relayed_bytes: None,
                    stream_sha256: None,
                }),
            ),
        ];
        for (route, relayed, want) in rows {
            let report = AttemptReport {
                route: route.clone(),
                relayed: relayed.clone(),
                ..Default::default()
            };
            assert_eq!(travelled(&report), want, "{route:?} {relayed:?}");
        }
    }
}
