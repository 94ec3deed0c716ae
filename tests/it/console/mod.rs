//! The operator console (feature `console`).

mod browser;
mod http;
mod pages;
mod security;
mod starvation;
