use std::path::PathBuf;

/// What can be wrong with the mail configuration or a message before any delivery is tried.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// An address (the configured sender, a recipient) that RFC 5322 does not accept.
    #[error("mail: {field} address {address:?} is not valid: {reason}")]
    Address {
        field: &'static str,
        address: String,
        reason: String,
    },
    #[error("mail: the message for job {job_id} has no recipient")]
    NoRecipients { job_id: u64 },
    #[error("mail: {id:?} is not a Message-ID of the form <left@right>")]
    MessageId { id: String },
    /// lettre refused to assemble the message (a header it cannot encode).
    #[error("mail: cannot build the message for job {job_id}: {reason}")]
    Build { job_id: u64, reason: String },
    #[error("mail: [mail.transport] {what}")]
    Transport { what: String },
    #[error("mail: cannot read the SMTP password file {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("mail: the SMTP password file {path} is empty")]
    EmptyPasswordFile { path: PathBuf },
    #[error("mail: TLS setup for {host:?} failed: {reason}")]
    Tls { host: String, reason: String },
}
