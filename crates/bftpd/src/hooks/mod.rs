//! Webhooks (SPEC §16): the `[webhooks]` section and its key (`config`), and the HTTP side
//! that sends one signed event to one target (`send`).

pub mod config;
pub mod send;
