//! Events for programs (SPEC §16): how a webhook request is signed and checked (`sign`), and
//! which `notify` entries are webhook targets rather than mailboxes (`target`).

pub mod sign;
pub mod target;

pub use sign::{sign, verify, VerifyError, SIGNATURE_HEADER};
pub use target::{
    is_webhook, mail_recipients, shown_entry, webhooks, MailRecipients, WebhookTarget,
};
