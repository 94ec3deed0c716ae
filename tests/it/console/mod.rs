//! The operator console (feature `console`).

mod browser;
pub(crate) mod http;
mod jobs;
mod kinds;
mod pages;
mod security;
mod starvation;
mod timeline;
