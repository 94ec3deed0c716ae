//! The operator console (feature `console`).

mod browser;
