//! bftpd, the file transfer controller: the daemon library.
//!
//! [`run`] opens the store, serves the API on the Unix socket and returns when `shutdown`
//! completes. The binary (`main.rs`) only parses arguments, sets up logging and signals.

pub mod api;
pub mod attempt;
pub mod clock;
pub mod config;
mod daemon;
pub mod foreground;
pub mod hooks;
pub mod hosts;
mod humantime_duration;
pub mod lanes;
pub mod mail;
pub mod metrics;
pub mod scheduler;
pub mod secrets;
pub mod service;
pub mod store;
#[cfg(test)]
mod testkit;
pub mod views;
pub mod watch;

pub use daemon::run;
