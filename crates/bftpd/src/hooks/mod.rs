//! Webhooks (SPEC §16): the `[webhooks]` section and its key (`config`), the HTTP side that
//! sends one signed event to one target (`send`), the deliverer of the store's event log
//! (`deliver`) and the body of an event (`body`).

pub mod body;
pub mod config;
pub mod deliver;
pub mod send;
