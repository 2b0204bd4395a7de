//! TLS on the server-to-server data connection (TLS FXP), decided before each copy.
//!
//! One of the two servers must be the TLS client of their data connection. `SSCN ON`
//! makes a server that offers it take that part (proFTPD's mod_tls does; vsftpd and
//! Pure-FTPd answer 500 and can only be TLS servers). The rule (`bftp_core::tls::data_plan`):
//! the stricter of the two sides' data policies decides; the source is asked first, then
//! the destination; with neither able, `required` fails the copy permanently with the
//! explanation and `preferred` moves the bytes in clear, which the ledger says per file.
//! The server that is not the TLS client gets `SSCN OFF` if an earlier copy set it on.

use bftp_core::reply::{Disposition, PermanentKind};
use bftp_core::tls::{
    data_plan, ControlTls, CopyTls, DataAbility, DataPlan, DataProtection, TlsClient, TlsPolicy,
};

use super::outcome::{JobFailure, PairError};
use super::{index, Pair};
use crate::session::{Session, SessionError};
use crate::transcript::Side;

/// What the data of the last copy got, for the ledger and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTls {
    /// Whether the bytes moved through TLS between the servers.
    pub encrypted: bool,
    /// The server that was the TLS client (SSCN ON), when encrypted.
    pub tls_client: Option<Side>,
    /// Why the data moved in clear although a policy asked for TLS.
    pub note: Option<String>,
}

impl DataTls {
    /// One line for the ledger: `data encrypted, TLS client: source` / `data in clear`.
    pub fn describe(&self) -> String {
        match (self.encrypted, self.tls_client, &self.note) {
            (true, Some(side), _) => format!("data encrypted (TLS client: {side})"),
            (true, None, _) => "data encrypted".into(),
            (false, _, Some(note)) => format!("data in clear: {note}"),
            (false, _, None) => "data in clear".into(),
        }
    }
}

fn side_of(c: TlsClient) -> Side {
    match c {
        TlsClient::Source => Side::Source,
        TlsClient::Destination => Side::Destination,
    }
}

impl Pair {
    fn session_error(&self, side: Side, command: &str, error: SessionError) -> PairError {
        let disposition =
            bftp_core::reply::classify(bftp_core::reply::CommandKind::Other, error.outcome());
        PairError {
            failure: JobFailure::Session {
                side,
                host: self.logins[index(side)].host.clone(),
                command: command.into(),
                error,
            },
            disposition,
            transcript: self.recorder.take(),
        }
    }

    /// Before PROT or SSCN goes out on `side`: a command there must not overtake replies
    /// owed to commands sent ahead for a next copy, so those are settled first (rare: the
    /// states stay as the first copy set them for the rest of a job).
    async fn before_tls_command(&mut self, side: Side) -> Result<(), PairError> {
        self.settle_ahead("PROT or SSCN before the next copy")
            .await?;
        self.drain_owed(side).await;
        Ok(())
    }

    async fn prot(&mut self, side: Side, private: bool) -> Result<bool, PairError> {
        if self.session(side).prot_private() != private {
            self.before_tls_command(side).await?;
        }
        match self.session(side).set_prot(private).await {
            Ok(done) => Ok(done),
            Err(e) => Err(self.session_error(side, "PROT", e)),
        }
    }

    async fn sscn(&mut self, side: Side, on: bool) -> Result<bool, PairError> {
        if self.session(side).sscn_on() != on {
            self.before_tls_command(side).await?;
        }
        match self.session(side).set_sscn(on).await {
            Ok(done) => Ok(done),
            Err(e) => Err(self.session_error(side, "SSCN", e)),
        }
    }

    /// PROT and SSCN on both servers for the next copy, by the data policies; the plan
    /// taken is kept for [`Pair::data_tls`].
    /// No data protection is in play on this pair.
    pub(super) fn plain_data(&self) -> bool {
        [self.logins[0].tls.data, self.logins[1].tls.data] == [TlsPolicy::Off, TlsPolicy::Off]
            && !self.src.prot_private()
            && !self.dst.prot_private()
    }

    pub(super) async fn protect_data(&mut self) -> Result<(), PairError> {
        let policies = [self.logins[0].tls.data, self.logins[1].tls.data];
        if self.plain_data() {
            self.data_tls = None;
            return Ok(());
        }
        let tls = [self.src.tls().is_some(), self.dst.tls().is_some()];
        let mut ability = [DataAbility::default(); 2];
        for side in [Side::Source, Side::Destination] {
            let i = index(side);
            ability[i].tls = tls[i];
            if tls[i] && policies[0].max(policies[1]) != TlsPolicy::Off {
                ability[i].sscn = self.session(side).sscn_possible();
            }
        }
        // Ask for SSCN in the plan's order until one side takes it.
        let mut plan = data_plan(policies[0], policies[1], ability[0], ability[1]);
        while let DataPlan::Encrypted(client) = plan {
            let side = side_of(client);
            if self.sscn(side, true).await? {
                break;
            }
            ability[index(side)].sscn = false;
            plan = data_plan(policies[0], policies[1], ability[0], ability[1]);
        }
        match plan {
            DataPlan::Encrypted(client) => {
                let side = side_of(client);
                self.sscn(side.other(), false).await?;
                let both = self.prot(Side::Source, true).await?
                    && self.prot(Side::Destination, true).await?;
                if both {
                    self.data_tls = Some(DataTls {
                        encrypted: true,
                        tls_client: Some(side),
                        note: None,
                    });
                    return Ok(());
                }
                self.clear_data("PROT P refused").await
            }
            DataPlan::Clear => {
                let why = if policies[0].max(policies[1]) == TlsPolicy::Off {
                    None
                } else {
                    Some(self.why_no_tls(tls))
                };
                self.clear_data_with(why).await
            }
            DataPlan::Impossible => Err(PairError {
                failure: JobFailure::DataTls {
                    explanation: format!(
                        "the data policy requires TLS between the servers, and {}",
                        self.why_no_tls(tls)
                    ),
                },
                disposition: Disposition::Permanent(PermanentKind::CommandRejected),
                transcript: self.recorder.take(),
            }),
        }
    }

    /// PROT and SSCN on both servers for a relay: each leg is its own TLS session with bftpd
    /// as the client, so each side's own data policy decides its leg (no SSCN: `SSCN OFF`
    /// where an earlier copy set it on). `required` without TLS on that side's control
    /// connection, or with PROT P refused, fails the copy permanently; `preferred` leaves the
    /// leg in clear, which the ledger says. Returns which legs are TLS (source, destination).
    pub(super) async fn protect_relay_legs(&mut self) -> Result<[bool; 2], PairError> {
        let mut legs = [false; 2];
        let mut clear = Vec::new();
        for side in [Side::Source, Side::Destination] {
            let i = index(side);
            let policy = self.logins[i].tls.data;
            self.sscn(side, false).await?;
            if policy == TlsPolicy::Off {
                self.prot(side, false).await?;
                continue;
            }
            let has_tls = self.session(side).tls().is_some();
            legs[i] = has_tls && self.prot(side, true).await?;
            if legs[i] {
                continue;
            }
            let why = if has_tls {
                format!("the {side} {} refused PROT P", self.logins[i].host)
            } else {
                format!(
                    "the {side} {} has no TLS control connection",
                    self.logins[i].host
                )
            };
            if policy == TlsPolicy::Required {
                return Err(PairError {
                    failure: JobFailure::DataTls {
                        explanation: format!(
                            "the data policy requires TLS on the relay's {side} leg, and {why}"
                        ),
                    },
                    disposition: Disposition::Permanent(PermanentKind::CommandRejected),
                    transcript: self.recorder.take(),
                });
            }
            self.prot(side, false).await?;
            clear.push(why);
        }
        let wanted = [self.logins[0].tls.data, self.logins[1].tls.data] != [TlsPolicy::Off; 2];
        self.data_tls = wanted.then(|| DataTls {
            encrypted: legs == [true, true],
            tls_client: None,
            note: (!clear.is_empty()).then(|| format!("relayed, {}", clear.join("; "))),
        });
        Ok(legs)
    }

    fn why_no_tls(&self, tls: [bool; 2]) -> String {
        let host = |i: usize| self.logins[i].host.as_str();
        match tls {
            [false, _] => format!("the source {} has no TLS control connection", host(0)),
            [_, false] => format!("the destination {} has no TLS control connection", host(1)),
            _ => format!(
                "neither {} nor {} can be the TLS client of their data connection (SSCN ON refused by both; vsftpd and Pure-FTPd can only be TLS servers)",
                host(0),
                host(1)
            ),
        }
    }

    async fn clear_data(&mut self, why: &str) -> Result<(), PairError> {
        self.clear_data_with(Some(why.to_owned())).await
    }

    async fn clear_data_with(&mut self, why: Option<String>) -> Result<(), PairError> {
        for side in [Side::Source, Side::Destination] {
            self.prot(side, false).await?;
            self.sscn(side, false).await?;
        }
        self.data_tls = Some(DataTls {
            encrypted: false,
            tls_client: None,
            note: why,
        });
        Ok(())
    }

    /// What the last copy's data got (`None`: no TLS asked for or in force).
    pub fn data_tls(&self) -> Option<&DataTls> {
        self.data_tls.as_ref()
    }

    /// This pair's TLS for the ledger, as data: each side's control connection and the last
    /// copy's data. `None` when nothing on the pair uses or asked for TLS.
    pub fn tls_summary(&self) -> Option<CopyTls> {
        let control = |s: &Session| -> Option<ControlTls> {
            match (s.tls(), s.tls_note()) {
                (Some(t), _) => Some(ControlTls::Tls {
                    version: t.version.clone(),
                    certificate: t.trust.check(),
                }),
                (None, Some(_)) => Some(ControlTls::Clear),
                (None, None) => None,
            }
        };
        let tls = CopyTls {
            source: control(&self.src),
            destination: control(&self.dst),
            data: self.data_tls.as_ref().map(|d| DataProtection {
                encrypted: d.encrypted,
                tls_client: d.tls_client.map(|side| match side {
                    Side::Source => TlsClient::Source,
                    Side::Destination => TlsClient::Destination,
                }),
                clear_reason: d.note.clone(),
            }),
        };
        (tls != CopyTls::default()).then_some(tls)
    }
}

/// The `bftp verify` check names of TLS.
pub const CHECK_SOURCE_TLS: &str = "source TLS";
pub const CHECK_DESTINATION_TLS: &str = "destination TLS";
pub const CHECK_DATA_TLS: &str = "data TLS";

/// What a FEAT reply offers of TLS: the extensions bftpd uses, each `yes` or `no`.
pub(crate) fn offered(features: &[String]) -> String {
    let has = |name: &str| {
        features.iter().any(|l| {
            let l = l.trim().to_ascii_uppercase();
            l == name || l.starts_with(&format!("{name} "))
        })
    };
    let auth = features.iter().any(|l| {
        l.trim().to_ascii_uppercase().starts_with("AUTH") && l.to_ascii_uppercase().contains("TLS")
    });
    let yn = |b: bool| if b { "yes" } else { "no" };
    format!(
        "offers AUTH TLS: {}, PROT P: {}, SSCN: {}, CPSV: {}",
        yn(auth),
        yn(has("PROT")),
        yn(has("SSCN")),
        yn(has("CPSV"))
    )
}

impl Pair {
    /// `bftp verify`: what each server offers of TLS (FEAT), what its control connection got,
    /// and what the job's data would get (the copy's plan, run now: SSCN and PROT are sent).
    pub(super) async fn tls_checks(&mut self) -> Vec<super::Check> {
        let mut checks = Vec::new();
        let asked = self
            .logins
            .iter()
            .any(|l| l.tls.control_policy() != TlsPolicy::Off || l.tls.data != TlsPolicy::Off);
        // Nothing for a job whose sides ask for no TLS and got none.
        if !asked && self.src.tls().is_none() && self.dst.tls().is_none() {
            return checks;
        }
        for (name, side) in [
            (CHECK_SOURCE_TLS, Side::Source),
            (CHECK_DESTINATION_TLS, Side::Destination),
        ] {
            let result = self.exchange(side, "FEAT").await;
            let features = match &result {
                Ok(reply) if reply.code().get() == 211 => reply.lines().to_vec(),
                _ => Vec::new(),
            };
            let session = self.session(side);
            let got = match (session.tls(), session.tls_note()) {
                (Some(t), _) => format!("control {} ({})", t.version, t.trust),
                (None, Some(_)) => "control in clear (AUTH TLS refused)".to_owned(),
                (None, None) => "control in clear (policy off)".to_owned(),
            };
            let policy = self.logins[index(side)].tls;
            checks.push(super::Check {
                name: name.to_owned(),
                ok: true,
                detail: format!(
                    "{}; {got}; policy control {}, data {}",
                    offered(&features),
                    policy.control_policy(),
                    policy.data
                ),
            });
        }
        let (ok, detail) = match self.protect_data().await {
            Ok(()) => (
                true,
                self.data_tls
                    .as_ref()
                    .map(DataTls::describe)
                    .unwrap_or_else(|| "data in clear (policy off)".to_owned()),
            ),
            Err(e) => (false, e.failure.to_string()),
        };
        checks.push(super::Check {
            name: CHECK_DATA_TLS.to_owned(),
            ok,
            detail,
        });
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feat_lines_show_what_a_server_offers_of_tls() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // proFTPD 1.3.8 with mod_tls (abridged), vsftpd 3.0.3 with ssl_enable.
        let proftpd = lines(&[
            "Features:",
            " AUTH TLS",
            " PBSZ",
            " PROT",
            " SSCN",
            " SIZE",
            "End",
        ]);
        assert_eq!(
            offered(&proftpd),
            "offers AUTH TLS: yes, PROT P: yes, SSCN: yes, CPSV: no"
        );
        let vsftpd = lines(&[
            "Features:",
            " AUTH SSL",
            " AUTH TLS",
            " PBSZ",
            " PROT",
            "End",
        ]);
        assert!(offered(&vsftpd).contains("SSCN: no"));
        let clear = lines(&["Features:", " SIZE", " PROTX", "End"]);
        assert_eq!(
            offered(&clear),
            "offers AUTH TLS: no, PROT P: no, SSCN: no, CPSV: no"
        );
    }
}
