//! What the API and the postman both need to know about a job's report: who it goes to,
//! its Message-ID, and its state as the API shows it.

use bftp_api::ReportView;
use bftp_core::event::MailRecipients;
use bftp_mail::MailConfig;
use bftp_store::{Job, OutboxEntry, OutboxState};

/// What the API and the postman both need to know about mail: who a report goes to and
/// what its Message-ID is.
#[derive(Debug, Clone)]
pub struct MailSettings {
    pub enabled: bool,
    pub from: String,
    pub owner_domain: String,
    /// The right-hand side of every Message-ID: the domain of `from`.
    pub id_domain: String,
}

impl MailSettings {
    pub fn new(c: &MailConfig) -> MailSettings {
        let id_domain = c
            .from
            .rsplit_once('@')
            .map(|(_, d)| d.trim_end_matches('>').to_string())
            .unwrap_or_else(|| "localhost".into());
        MailSettings {
            enabled: c.enabled,
            from: c.from.clone(),
            owner_domain: c.owner_domain.clone(),
            id_domain,
        }
    }

    /// The job's notify addresses, or its owner's login at `owner_domain` (RFC 1068 mailed
    /// the user who asked).
    pub fn recipients(&self, job: &Job) -> Result<Vec<String>, String> {
        self.recipients_of(&job.spec.notify, job.owner_uid, "job")
    }

    /// The mailboxes of `notify`, or the owner's login at `owner_domain` when `notify` is
    /// empty, or none when it names webhooks only (`bftp_core::event::mail_recipients`);
    /// `what` names the thing mailed about (`job`, `watch`).
    pub fn recipients_of(
        &self,
        notify: &[String],
        owner_uid: u32,
        what: &str,
    ) -> Result<Vec<String>, String> {
        match bftp_core::event::mail_recipients(notify) {
            MailRecipients::Listed(boxes) => return Ok(boxes),
            MailRecipients::Nobody => return Ok(Vec::new()),
            MailRecipients::Owner => {}
        }
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(owner_uid)) {
            Ok(Some(user)) => Ok(vec![format!("{}@{}", user.name, self.owner_domain)]),
            Ok(None) => Err(format!(
                "the {what} has no notify address and its owner (uid {owner_uid}) has no user name to mail"
            )),
            Err(e) => Err(format!("cannot look up the user name of uid {owner_uid}: {e}")),
        }
    }

    pub fn message_id(&self, e: &OutboxEntry) -> String {
        bftp_mail::message_id(e.job.0, e.created_at.0, &self.id_domain)
    }

    pub fn report_view(&self, job: &Job, e: &OutboxEntry) -> ReportView {
        let (state, at) = match e.state {
            OutboxState::Pending if !self.enabled => ("disabled", None),
            OutboxState::Pending => ("pending", None),
            OutboxState::Delivered { at } => ("delivered", Some(at.to_rfc3339())),
            OutboxState::GaveUp { at } => ("gave_up", Some(at.to_rfc3339())),
        };
        ReportView {
            state: state.to_string(),
            message_id: self.message_id(e),
            recipients: self.recipients(job).unwrap_or_default(),
            tries: e.tries,
            next_try_at: match e.state {
                OutboxState::Pending if self.enabled => e.next_try_at.map(|t| t.to_rfc3339()),
                _ => None,
            },
            at,
            last_error: e.last_error.clone(),
        }
    }
}
