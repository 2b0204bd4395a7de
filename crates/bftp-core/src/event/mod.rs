//! Events for programs (SPEC §16): how a webhook request is signed and checked (`sign`),
//! which `notify` entries are webhook targets rather than mailboxes (`target`), and what a
//! receiver's HTTP status means for the delivery (`answer`).

pub mod answer;
pub mod sign;
pub mod target;

pub use answer::{judge_status, Answer};
pub use sign::{sign, verify, VerifyError, SIGNATURE_HEADER};
pub use target::{
    is_webhook, mail_recipients, shown_entry, webhooks, MailRecipients, WebhookTarget,
};
