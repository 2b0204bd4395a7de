//! Events for other programs (SPEC §16, issue 31): what happened to a job or a watch,
//! written to the store's event log in the transaction of the change (`kind`), the rule of a
//! webhook delivery's tries (`delivery`), how a webhook request is signed and checked
//! (`sign`), which `notify` entries are webhook targets rather than mailboxes (`target`), and
//! what a receiver's HTTP status means for the delivery (`answer`).

pub mod answer;
mod delivery;
mod kind;
pub mod sign;
pub mod target;

pub use answer::{judge_status, Answer};
pub use delivery::{after_try, Backoff, TryOutcome, Verdict};
pub use kind::{event_of_member_change, events_of_final, watch_late, EventFact, EventKind, SCHEMA};
pub use sign::{sign, verify, VerifyError, SIGNATURE_HEADER};
pub use target::{
    is_webhook, mail_recipients, shown_entry, webhooks, MailRecipients, WebhookTarget,
};
