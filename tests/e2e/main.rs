mod engine;
mod foundation;
mod frontend_ftp;
mod hostile;
mod hostile_infra;
mod infra;
mod slow;
mod slow_engine;
